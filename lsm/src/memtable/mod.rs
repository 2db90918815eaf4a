//! The memtable: recent writes in a skip list, ordered by internal key.
//!
//! One writer inserts at a time (the write leader, so inserts are in sequence order; the list's
//! writer lock makes any other caller wait) while readers take no lock. When its memory
//! (entries, bloom filter and point index) reaches `write_buffer_size` the memtable is frozen
//! and a background thread flushes it to an L0 table.
//!
//! The list is our own ([`skiplist`]): nodes in the order of internal keys, each holding a
//! chain of up to [`skiplist::MAX_CHAIN`] versions of one user key (kind, sequence number, a
//! pointer to the next older version, the value; newest first). A node — its links, a pointer
//! to its newest version and its internal key (the user key with its oldest version's trailer)
//! — is carved out of the memtable's node [`arena`] (nodes taller than one level in an arena of
//! their own, so the levels a search walks far are dense), each version out of its value
//! arena. A cursor walks the nodes and each node's versions, which is the order of internal
//! keys, and no step of it walks more than one chain. A new version of a key the memtable holds
//! goes in front of the chain of the key's newest node, which the point index finds: no
//! descent of the list, which is what a rewritten counter, a collection's metadata record or a
//! re-scored member costs otherwise; only a full chain makes a new node. An entry of a 16-byte
//! key and a 100-byte value takes about 148 bytes (a 43-byte node: 1.33 links of 8 bytes on
//! average, a word of key length and version pointer, the internal key; and a 105-byte
//! version), a rewrite of it 113, and the memtable charges the arenas' chunks, whole as each is made,
//! against `write_buffer_size`. `crossbeam_skiplist`, which the first list replaced, made
//! each node an allocation of its own: ~174 bytes an entry with the value in an arena, and a
//! dropped memtable's nodes, freed one by one, left the next memtable's nodes spread over slabs
//! 62 % full (8 MB beside 16 MB of nodes after 10 M random overwrites).
//!
//! Nothing is ever removed from a memtable's skip list: it only grows until the whole memtable
//! is dropped, which needs the last reference to it. So no node can be freed while anyone
//! reads it: a lookup or a cursor step costs no atomic read-modify-write, only loads.
//!
//! Point lookups ask a bloom filter of the user keys first (an absent key skips everything),
//! then the [`point_index`], a hash table of each key's newest node: a lookup is answered from
//! that node's chain (its first version, at the latest sequence number) without descending the
//! list, which only older snapshots and keys the index has no slot for still need. Both are sized when the memtable is made and
//! count against the write buffer: entries fill the rest. The first memtable sizes them for
//! the smallest entries (about a seventh of the buffer); each later one for entries the size
//! of its predecessor's (see [`Memtable::with_budget_after`]).
//! They and the arenas' chunks are anonymous mappings ([`crate::pages`]), zeroed by the kernel
//! (the lookups resident once touched, the chunks at once), and unmapped when the memtable is
//! dropped: a memtable takes nothing from the allocator per entry.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};

use bytes::Bytes;

use crate::iter::InternalIterator;
use crate::key::{self, ValueKind};
use crate::range_del::{FragmentMap, RangeTombstone, Region, TombstoneSource};
use crate::sstable::bloom::{self, AtomicBloom};
use crate::Result;

mod apply;
mod arena;
mod point_index;
mod skiplist;
#[cfg(test)]
use apply::APPLY_WINDOW;
use arena::Arena;
use point_index::{PointIndex, Probe};
use skiplist::{Hint, Node, Place, SkipList, Version};

/// What a range tombstone is charged beside its bounds (it lives in the memtable's
/// [`MemTombstones`], not in the list).
const RANGE_DEL_OVERHEAD: usize = 64;

/// Values at least this long leave [`Memtable::get_pinned`] as a view of the arena, shorter
/// ones as a copy (cheaper than the view's allocation and reference count).
pub const PIN_AT: usize = 512;

/// A value in a memtable's arena, with the memtable that keeps it alive (a version's bytes
/// never change once published, and the arena is freed only with the memtable).
struct Pinned {
    _mem: Arc<Memtable>,
    version: Version,
}

impl AsRef<[u8]> for Pinned {
    fn as_ref(&self) -> &[u8] {
        self.version.value()
    }
}

/// The memtable's bloom filter is sized for one key per this many bytes of capacity...
const BLOOM_BYTES_PER_KEY: usize = 64;
/// ...at this many bits a key: about 2 % of the memtable's size.
const BLOOM_BITS_PER_KEY: u32 = 10;

/// A sorted in-memory table of recent writes.
#[derive(Debug)]
pub struct Memtable {
    /// The entries: internal keys and values, in the list's arenas.
    map: SkipList,
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
    /// Set when the memtable is frozen to return the memory of data just dropped (see
    /// [`Memtable::mark_dropped`]).
    dropped: std::sync::atomic::AtomicBool,
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
        let chunk = if capacity > 0 { Arena::chunk_for(capacity) } else { arena::MAX_CHUNK };
        Self::with_lookups(wal_number, (capacity > 0).then(|| LookupSizes::for_capacity(capacity)), chunk)
    }

    fn with_lookups(wal_number: u64, sizes: Option<LookupSizes>, chunk: usize) -> Self {
        let lookups = sizes.map(|s| Lookups {
            bloom: AtomicBloom::new(s.bloom_keys, BLOOM_BITS_PER_KEY),
            index: PointIndex::with_slots(s.index_slots),
        });
        Memtable {
            map: SkipList::new(chunk),
            size: AtomicUsize::new(0),
            wal_number,
            largest_seq: AtomicU64::new(0),
            range_dels: RwLock::new(MemTombstones::default()),
            range_del_count: AtomicUsize::new(0),
            lookups,
            prefaulted: std::sync::atomic::AtomicBool::new(false),
            dropped: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// An empty memtable whose whole memory once full (entries, bloom filter and point index,
    /// see [`Memtable::memory_usage`]) is `budget` bytes: the lookups are sized from the budget
    /// and the entries get the rest. A budget too small to spare a quarter for the lookups
    /// gets none.
    pub fn with_budget(wal_number: u64, budget: usize) -> Self {
        Self::with_lookups(wal_number, Self::with_budget_sizes(budget), Arena::chunk_for(budget))
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
            return Self::with_lookups(wal_number, default, Arena::chunk_for(budget));
        };
        let keys = budget / entry_bytes;
        let keys = keys.saturating_add(keys / 4);
        // Never below a quarter of the default either: after a run of large values, a memtable
        // of small ones is slower to read (fuller lookups) but not by a cliff.
        let sizes = default.map(|d| LookupSizes {
            bloom_keys: keys.clamp(d.bloom_keys / 4, d.bloom_keys),
            index_slots: PointIndex::slots_for_keys(keys).clamp(d.index_slots / 4, d.index_slots),
        });
        Self::with_lookups(wal_number, sizes, Arena::chunk_for(budget))
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
        self.insert_hashed(seq, kind, user_key, value, bloom::hash_key(user_key), None);
    }

    /// [`Memtable::insert`] of a key whose [`bloom::hash_key`] is `hash`, with where it goes in
    /// the list if that was searched for already.
    fn insert_hashed(
        &self,
        seq: u64,
        kind: ValueKind,
        user_key: &[u8],
        value: &[u8],
        hash: u64,
        place: Option<&Place>,
    ) {
        if kind == ValueKind::RangeDelete {
            self.size.fetch_add(user_key.len() + value.len() + RANGE_DEL_OVERHEAD, Ordering::Relaxed);
            let t = RangeTombstone { start: user_key.to_vec(), end: value.to_vec(), seq };
            let mut dels = self.range_dels.write().unwrap_or_else(|e| e.into_inner());
            dels.fragments.insert(&t);
            dels.list.push(t);
            self.range_del_count.fetch_add(1, Ordering::Release);
            self.largest_seq.fetch_max(seq, Ordering::Relaxed);
            return;
        }
        let trailer = key::pack_trailer(seq, kind);
        let (_, _, charge) = match &self.lookups {
            Some(l) => {
                // The key's newest node, found through the index, takes the new version without
                // a search of the list (a key the bloom filter has not seen needs no probe); a
                // new node is recorded, and the key added to the filter, before the write's
                // sequence number is published (see `point_index`).
                let hint = || {
                    if !l.bloom.may_contain(hash) {
                        return Hint::Absent;
                    }
                    match l.index.probe(hash, user_key) {
                        Probe::Found(node) => Hint::Node(node),
                        Probe::Absent => Hint::Absent,
                        Probe::Unknown => Hint::Unknown,
                    }
                };
                let inserted =
                    self.map.insert(user_key, trailer, value, hint, |node| l.index.note(hash, user_key, node), place);
                l.bloom.add(hash);
                inserted
            }
            None => self.map.insert(user_key, trailer, value, || Hint::Unknown, |_| {}, place),
        };
        self.size.fetch_add(charge, Ordering::Relaxed);
        self.largest_seq.fetch_max(seq, Ordering::Relaxed);
    }

    /// The newest version of `user_key` with sequence number `<= seq` (its value copied).
    pub fn get(&self, user_key: &[u8], seq: u64) -> Option<Lookup> {
        self.find(user_key, seq).and_then(|v| Self::lookup_of(v, None))
    }

    /// [`Memtable::get`], with a value of [`PIN_AT`] bytes or more handed out as a view of
    /// the memtable's arena that keeps the memtable alive (RocksDB's `PinnableSlice`), not
    /// a copy: a point read of a 4 KiB bitmap segment or a large string copies nothing here.
    pub fn get_pinned(self: &Arc<Self>, user_key: &[u8], seq: u64) -> Option<Lookup> {
        self.find(user_key, seq).and_then(|v| Self::lookup_of(v, Some(self)))
    }

    /// Starts loading what a lookup of `user_key`, whose [`bloom::hash_key`] is `hash`, reads
    /// at `stage` (0, 1, 2): its filter line and point-index slot; the node that slot points
    /// at; that node's newest version. A batch of lookups prefetches each stage for every key
    /// before the next, so the loads of one stage overlap and each is in the CPU's cache by
    /// the time the next stage reads it.
    pub fn prefetch_lookup(&self, user_key: &[u8], hash: u64, stage: u8) {
        let Some(l) = &self.lookups else { return };
        match stage {
            0 => {
                l.bloom.prefetch(hash);
                l.index.prefetch(hash);
            }
            1 => {
                if let Some(node) = l.index.first_node(hash) {
                    crate::prefetch(node.addr() as *const u8);
                }
            }
            _ => {
                if let Some(node) = l.index.first_node(hash).filter(|n| n.user_key() == user_key) {
                    crate::prefetch(self.map.newest(node).addr());
                }
            }
        }
    }

    /// The newest version of `user_key` with sequence number `<= seq`.
    fn find(&self, user_key: &[u8], seq: u64) -> Option<Version> {
        let seq = seq.min(key::MAX_SEQUENCE);
        let ceiling = key::pack_trailer(seq, ValueKind::MAX);
        if let Some(l) = &self.lookups {
            let hash = bloom::hash_key(user_key);
            if !l.bloom.may_contain(hash) {
                return None;
            }
            match l.index.probe(hash, user_key) {
                Probe::Absent => return None,
                // The key's newest node: a read at the latest sequence number takes its first
                // version; an older snapshot may need an older node, which the list finds.
                Probe::Found(node) => {
                    if let Some(v) = self.map.newest(node).first_at_or_below(ceiling) {
                        return Some(v);
                    }
                }
                Probe::Unknown => {}
            }
        }
        let target = key::seek_key(user_key, seq);
        let node = self.map.seek(&target).filter(|n| n.user_key() == user_key)?;
        self.map.newest(node).first_at_or_below(ceiling)
    }

    /// What a lookup that found version `v` answers: a copy of its value (the arena's bytes
    /// live only as long as the memtable), or with `pin` and a long value, a view that holds
    /// the memtable.
    fn lookup_of(v: Version, pin: Option<&Arc<Memtable>>) -> Option<Lookup> {
        let (seq, kind) = (v.trailer() >> 8, ValueKind::from_u8(v.trailer() as u8)?);
        Some(match kind {
            ValueKind::Put => Lookup::Found(
                match pin {
                    Some(mem) if v.value().len() >= PIN_AT => {
                        Bytes::from_owner(Pinned { _mem: Arc::clone(mem), version: v })
                    }
                    _ => Bytes::copy_from_slice(v.value()),
                },
                seq,
            ),
            ValueKind::Delete | ValueKind::RangeDelete => Lookup::Deleted(seq),
        })
    }

    /// The range tombstones, in insertion order.
    pub fn range_tombstones(&self) -> Vec<RangeTombstone> {
        self.range_dels.read().unwrap_or_else(|e| e.into_inner()).list.clone()
    }

    /// Marks the memtable as frozen to return the memory of data just dropped
    /// ([`crate::Db::flush_in_background`]): most of what it holds is dead, so its flush does
    /// not put the blocks it writes into the block cache.
    pub fn mark_dropped(&self) {
        self.dropped.store(true, Ordering::Relaxed);
    }

    /// True if [`Memtable::mark_dropped`] was called.
    pub fn is_dropped(&self) -> bool {
        self.dropped.load(Ordering::Relaxed)
    }

    /// True if the memtable holds range tombstones.
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
        MemIter { at: None, key: Vec::new(), mem: Arc::clone(self) }
    }
}

/// Cursor over a memtable: a version of a node, in the order of internal keys (nodes in
/// order, each node's versions newest first). No step walks more than a node's chain.
pub struct MemIter {
    /// A node of `mem`'s list and one of its versions, which live as long as `mem`.
    at: Option<(Node, Version)>,
    /// The internal key of `at`: its node's user key and its version's trailer.
    key: Vec<u8>,
    mem: Arc<Memtable>,
}

impl std::fmt::Debug for MemIter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemIter").field("valid", &self.at.is_some()).finish()
    }
}

impl MemIter {
    fn set(&mut self, at: Option<(Node, Version)>) {
        self.at = at;
        if let Some((node, version)) = at {
            self.key.clear();
            self.key.extend_from_slice(node.user_key());
            self.key.extend_from_slice(&version.trailer().to_le_bytes());
        }
    }

    /// `node`'s newest version.
    fn newest(&self, node: Option<Node>) -> Option<(Node, Version)> {
        node.map(|n| (n, self.mem.map.newest(n)))
    }

    /// `node`'s oldest version.
    fn oldest(&self, node: Option<Node>) -> Option<(Node, Version)> {
        node.map(|n| (n, self.mem.map.oldest(n)))
    }
}

impl InternalIterator for MemIter {
    fn valid(&self) -> bool {
        self.at.is_some()
    }
    fn key(&self) -> &[u8] {
        if self.at.is_some() {
            &self.key
        } else {
            &[]
        }
    }
    fn value(&self) -> &[u8] {
        self.at.as_ref().map_or(&[], |(_, v)| v.value())
    }
    fn value_bytes(&self) -> Bytes {
        self.at.as_ref().map(|(_, v)| Bytes::copy_from_slice(v.value())).unwrap_or_default()
    }
    fn seek_to_first(&mut self) -> Result<()> {
        let at = self.newest(self.mem.map.first());
        self.set(at);
        Ok(())
    }
    fn seek_to_last(&mut self) -> Result<()> {
        let at = self.oldest(self.mem.map.last());
        self.set(at);
        Ok(())
    }
    fn seek(&mut self, target: &[u8]) -> Result<()> {
        // The first node at or after the target holds the first version at or after it: of
        // the target's key, its newest version at or below the target's trailer (its oldest
        // is); of a later key, its newest.
        let (user_key, trailer) = (key::user_key(target), key::trailer(target));
        let at = match self.mem.map.seek(target) {
            Some(node) if node.user_key() == user_key => match self.mem.map.newest(node).first_at_or_below(trailer) {
                Some(v) => Some((node, v)),
                None => self.newest(self.mem.map.next(node)),
            },
            node => self.newest(node),
        };
        self.set(at);
        Ok(())
    }
    fn seek_for_prev(&mut self, target: &[u8]) -> Result<()> {
        // The last version at or before the target: in the first node at or after it, the
        // oldest of the target's key's versions at or above its trailer; else the oldest
        // version of the node before.
        let (user_key, trailer) = (key::user_key(target), key::trailer(target));
        let (before, after) = self.mem.map.around(target);
        let found = after
            .filter(|n| n.user_key() == user_key)
            .and_then(|n| self.mem.map.newest(n).last_at_or_above(trailer).map(|v| (n, v)));
        let at = found.or_else(|| self.oldest(before));
        self.set(at);
        Ok(())
    }
    fn next(&mut self) -> Result<()> {
        let at = self.at.and_then(|(node, v)| match v.older() {
            Some(older) => Some((node, older)),
            None => {
                let next = self.newest(self.mem.map.next(node));
                if let Some((n, _)) = next {
                    self.mem.map.prefetch_after(n);
                }
                next
            }
        });
        self.set(at);
        Ok(())
    }
    fn prev(&mut self) -> Result<()> {
        // The version just newer than this one in its node (chains link only to older
        // versions, and a newer one may have been copied since: found by trailer, not by
        // address), else the previous node's oldest.
        let at = self.at.and_then(|(node, at)| {
            let newer = at.trailer().checked_add(1).and_then(|floor| self.mem.map.newest(node).last_at_or_above(floor));
            match newer {
                Some(v) => Some((node, v)),
                None => self.oldest(self.mem.map.prev(node)),
            }
        });
        self.set(at);
        Ok(())
    }
}

#[cfg(test)]
mod tests;
