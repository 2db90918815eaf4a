//! Caches: a sharded block cache bounded in bytes, and a table cache bounding open tables.

mod lru;
mod row;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use std::hash::Hasher;

use bytes::Bytes;

pub use lru::Lru;
pub use row::RowCache;

use crate::sstable::Table;
use crate::stripe::Striped;
use crate::Result;

const SHARDS: usize = 16;

/// What a cached block costs beyond its bytes: its slot in the shard (key 16 bytes, the
/// handle 32, the clock's fields 24), its share of the shard's index and clock (~25 under
/// churn, see [`Lru`]) and the shared handle's header (32).
const BLOCK_ENTRY_OVERHEAD: usize = 128;

/// A map keyed by `(table number, u64)` in [`SHARDS`] CLOCK shards bounded in bytes, each
/// behind its own lock: the block cache's and the row cache's storage.
#[derive(Debug)]
struct Shards<V> {
    shards: Vec<Mutex<Lru<(u64, u64), V>>>,
}

impl<V: Clone> Shards<V> {
    /// Shards holding about `capacity` bytes in all.
    fn new(capacity: usize) -> Self {
        Shards { shards: (0..SHARDS).map(|_| Mutex::new(Lru::new(capacity / SHARDS))).collect() }
    }

    /// The locked shard `key` lives in.
    fn lock(&self, key: (u64, u64)) -> std::sync::MutexGuard<'_, Lru<(u64, u64), V>> {
        let mut h = lru::FastHasher::default();
        h.write_u64(key.0);
        h.write_u64(key.1);
        // The high bits are the best mixed.
        self.shards[(h.finish() >> 60) as usize % SHARDS].lock().unwrap_or_else(|e| e.into_inner())
    }

    fn each(&self) -> impl Iterator<Item = std::sync::MutexGuard<'_, Lru<(u64, u64), V>>> {
        self.shards.iter().map(|s| s.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Drops every entry of table `table`.
    fn evict_table(&self, table: u64) {
        self.each().for_each(|mut s| s.retain(|k| k.0 != table));
    }

    /// Changes the capacity to about `capacity` bytes, evicting what no longer fits.
    fn set_capacity(&self, capacity: usize) {
        self.each().for_each(|mut s| s.set_capacity(capacity / SHARDS));
    }

    /// Bytes held.
    fn usage(&self) -> usize {
        self.each().map(|s| s.usage()).sum()
    }
}

/// Engine-wide read counters, shared by the caches and every open table, striped per thread
/// (see [`crate::stripe`]): count into [`ReadCounters::local`], read totals with
/// [`ReadCounters::total`].
#[derive(Debug, Default)]
pub struct ReadCounters(Striped<ReadCounts>);

/// One stripe of the engine-wide read counters.
#[derive(Debug, Default)]
pub struct ReadCounts {
    /// Block reads served by the block cache.
    pub block_cache_hits: AtomicU64,
    /// Point lookups in a table that the row cache answered.
    pub row_cache_hits: AtomicU64,
    /// Point lookups in a table that could have used the row cache and found nothing there.
    pub row_cache_misses: AtomicU64,
    /// Compressed blocks read and decompressed.
    pub block_cache_misses: AtomicU64,
    /// Bloom filter probes.
    pub bloom_checks: AtomicU64,
    /// Probes that proved a key absent (a table read avoided).
    pub bloom_useful: AtomicU64,
    /// Internal entries examined by user-facing cursors (every version and tombstone stepped
    /// over counts): the work range reads do, which tombstones make grow.
    pub iter_entries: AtomicU64,
    /// Of those, deletions (point tombstones and entries hidden by range tombstones).
    pub iter_tombstones: AtomicU64,
    /// Seeks cursors made to pass a key's many old (or too new) versions instead of stepping.
    pub iter_reseeks: AtomicU64,
}

impl ReadCounters {
    /// The calling thread's stripe, to count into.
    pub fn local(&self) -> &ReadCounts {
        self.0.local()
    }

    /// The total of one counter over every stripe.
    pub fn total(&self, counter: impl Fn(&ReadCounts) -> &AtomicU64) -> u64 {
        self.0.iter().map(|c| counter(c).load(Ordering::Relaxed)).sum()
    }
}

/// The bytes an allocator hands out for a request of `len`: rounded up to its size class
/// (jemalloc's: 16-byte steps up to 128, then four classes per doubling; glibc's are finer, so
/// this errs on the side of charging more).
pub fn allocation_size(len: usize) -> usize {
    if len <= 128 {
        return len.max(1).next_multiple_of(16);
    }
    let spacing = (len - 1).ilog2() - 2;
    len.next_multiple_of(1 << spacing)
}

/// Decompressed blocks keyed by `(file number, block offset)`, in 16 LRU shards bounded in bytes,
/// and beside them, if asked for, the row cache (see [`RowCache`]). Under
/// [`crate::TableReadMode::Mmap`] uncompressed blocks are read in place from the memory map and
/// never cached.
///
/// **Charging table readers.** An open table holds its index and bloom filter outside the
/// cache, about 1.5 bytes per entry at 10 bits a key: a database of a hundred million entries
/// holds ~150 MB that no cache size bounds. With [`BlockCache::charge_readers`] on (the
/// default, [`crate::Options::charge_table_readers`]; RocksDB's `charge_table_reader`), the
/// open tables' memory is charged to the cache: blocks get the capacity less that, so the
/// cache's capacity bounds blocks and table metadata together. The charge is capped at half
/// the capacity, so a database whose metadata outgrows the cache still caches blocks (memory
/// then passes the capacity by the metadata beyond that half, as it would uncharged) rather
/// than reading every block from the file.
///
/// **Charging memtables.** With [`BlockCache::charge_memtables`] on
/// ([`crate::Options::charge_memtables`], off by default; RocksDB's `cost_write_buffer_to_cache`),
/// the memtables' memory (active and frozen) is charged too, so the capacity bounds blocks,
/// table metadata and memtables together, whatever point of its fill cycle the memtable is at.
/// Both charges together are capped at three quarters of the capacity: blocks always keep a
/// quarter.
#[derive(Debug)]
pub struct BlockCache {
    blocks: Shards<Bytes>,
    rows: Option<RowCache>,
    counters: Arc<ReadCounters>,
    /// Capacity in bytes (blocks and the charge together), what `set_capacity` last set.
    capacity: AtomicUsize,
    /// Bytes of the open tables' indexes and filters last reported.
    readers: AtomicUsize,
    /// Charge `readers` to the capacity.
    charge_readers: AtomicBool,
    /// Bytes of the memtables last reported (in whole MiB steps, see `set_memtables_memory`).
    memtables: AtomicUsize,
    /// Charge `memtables` to the capacity.
    charge_memtables: AtomicBool,
    /// Serialises changes of the blocks' capacity (the atomics above are read under it).
    resize: Mutex<()>,
}

impl BlockCache {
    /// A cache of about `capacity` bytes.
    pub fn new(capacity: usize, counters: Arc<ReadCounters>) -> Self {
        Self::with_rows(capacity, 0, counters)
    }

    /// A cache of about `capacity` bytes of blocks and `row_capacity` bytes of rows (0: no
    /// row cache).
    pub fn with_rows(capacity: usize, row_capacity: usize, counters: Arc<ReadCounters>) -> Self {
        let rows = (row_capacity > 0).then(|| RowCache::new(row_capacity));
        BlockCache {
            blocks: Shards::new(capacity),
            rows,
            counters,
            capacity: AtomicUsize::new(capacity),
            readers: AtomicUsize::new(0),
            charge_readers: AtomicBool::new(false),
            memtables: AtomicUsize::new(0),
            charge_memtables: AtomicBool::new(false),
            resize: Mutex::new(()),
        }
    }

    /// Charges the open tables' memory (reported by [`BlockCache::set_readers_memory`]) to
    /// the capacity, or stops charging it (see the type's docs).
    pub fn charge_readers(&self, on: bool) {
        self.charge_readers.store(on, Ordering::Relaxed);
        self.resize_blocks();
    }

    /// Tells the cache how many bytes the open tables hold beside it (their indexes and
    /// filters); with charging on, the blocks' share shrinks or grows to match.
    pub fn set_readers_memory(&self, bytes: usize) {
        if self.readers.swap(bytes, Ordering::Relaxed) != bytes && self.charge_readers.load(Ordering::Relaxed) {
            self.resize_blocks();
        }
    }

    /// Bytes the open tables hold beside the cache (their indexes and filters), as last
    /// reported (see [`BlockCache::set_readers_memory`]).
    pub fn readers_memory(&self) -> usize {
        self.readers.load(Ordering::Relaxed)
    }

    /// The part of the capacity the open tables are charged: their memory, up to half the
    /// capacity, with charging on; else nothing.
    pub fn readers_charge(&self) -> usize {
        if !self.charge_readers.load(Ordering::Relaxed) {
            return 0;
        }
        self.readers.load(Ordering::Relaxed).min(self.capacity.load(Ordering::Relaxed) / 2)
    }

    /// Charges the memtables' memory (reported by [`BlockCache::set_memtables_memory`]) to
    /// the capacity, or stops charging it (see the type's docs).
    pub fn charge_memtables(&self, on: bool) {
        self.charge_memtables.store(on, Ordering::Relaxed);
        self.resize_blocks();
    }

    /// Tells the cache how many bytes the memtables hold (active and frozen, with their
    /// lookup structures). With charging on, the blocks' share follows in whole-MiB steps, so
    /// a writer may report after every write group: the cache is resized only when the
    /// memtables cross a MiB boundary.
    pub fn set_memtables_memory(&self, bytes: usize) {
        let step = bytes & !((1 << 20) - 1);
        // Read first: the writer reports every group, and the step seldom changes.
        if self.memtables.load(Ordering::SeqCst) == step {
            return;
        }
        if self.memtables.swap(step, Ordering::SeqCst) != step && self.charge_memtables.load(Ordering::Relaxed) {
            self.resize_blocks();
        }
    }

    /// The part of the capacity the memtables are charged: their memory (in MiB steps) up to
    /// what the readers' charge leaves of three quarters of the capacity, with charging on;
    /// else nothing.
    pub fn memtables_charge(&self) -> usize {
        if !self.charge_memtables.load(Ordering::Relaxed) {
            return 0;
        }
        let most = (self.capacity.load(Ordering::Relaxed) / 4 * 3).saturating_sub(self.readers_charge());
        self.memtables.load(Ordering::Relaxed).min(most)
    }

    /// Sets the blocks' capacity to the capacity less the readers' and the memtables'
    /// charges, evicting what no longer fits.
    fn resize_blocks(&self) {
        let _serial = self.resize.lock().unwrap_or_else(|e| e.into_inner());
        let capacity = self.capacity.load(Ordering::Relaxed);
        self.blocks.set_capacity(capacity - self.readers_charge() - self.memtables_charge());
    }

    /// The row cache, if there is one.
    pub fn rows(&self) -> Option<&RowCache> {
        self.rows.as_ref()
    }

    /// The cached block; with `count`, the lookup is counted as a hit or a miss (background
    /// readers such as compaction pass `false` so the ratio describes user reads).
    pub fn get(&self, file: u64, offset: u64, count: bool) -> Option<Bytes> {
        let got = self.blocks.lock((file, offset)).get(&(file, offset));
        if count {
            let local = self.counters.local();
            let c = if got.is_some() { &local.block_cache_hits } else { &local.block_cache_misses };
            c.fetch_add(1, Ordering::Relaxed);
        }
        got
    }

    /// Caches a decompressed block, charged what it occupies: its allocation's size class,
    /// plus `BLOCK_ENTRY_OVERHEAD` (the entry, its share of the index and clock, the handle).
    pub fn insert(&self, file: u64, offset: u64, block: Bytes) {
        let charge = allocation_size(block.len()) + BLOCK_ENTRY_OVERHEAD;
        self.blocks.lock((file, offset)).insert((file, offset), block, charge);
    }

    /// Drops every cached block of table `file` (its file is being deleted): blocks of tables
    /// that compaction replaced would otherwise hold memory until the clock reached them.
    pub fn evict_file(&self, file: u64) {
        self.blocks.evict_table(file);
        if let Some(rows) = &self.rows {
            rows.evict_table(file);
        }
    }

    /// Changes the capacity to about `capacity` bytes (blocks and the readers' charge),
    /// evicting what no longer fits.
    pub fn set_capacity(&self, capacity: usize) {
        self.capacity.store(capacity, Ordering::Relaxed);
        self.resize_blocks();
    }

    /// Bytes of blocks held.
    pub fn usage(&self) -> usize {
        self.blocks.usage()
    }

    /// Bytes of rows held (0 without a row cache).
    pub fn row_usage(&self) -> usize {
        self.rows.as_ref().map_or(0, RowCache::usage)
    }

    /// The counters this cache updates.
    pub fn counters(&self) -> &Arc<ReadCounters> {
        &self.counters
    }
}

/// Open tables by file number, at most `max_open_files` of them (least recently used closed
/// first). Each open table holds a memory map, its index block and its bloom filter.
#[derive(Debug)]
pub struct TableCache {
    dir: PathBuf,
    mode: crate::TableReadMode,
    tables: Mutex<Lru<u64, Arc<Table>>>,
    /// A copy of the open tables, replaced (under `tables`' lock) whenever one opens or
    /// closes: point reads find their tables here without a lock or a reference count.
    open: arc_swap::ArcSwap<OpenTables>,
    block_cache: Arc<BlockCache>,
}

/// The open tables by file number (see [`TableCache::open_tables`]).
pub type OpenTables = lru::FastMap<u64, Arc<Table>>;

impl TableCache {
    /// A cache of tables in `dir`.
    pub fn new(dir: PathBuf, max_open_files: usize, block_cache: Arc<BlockCache>, mode: crate::TableReadMode) -> Self {
        let (tables, open) = (Mutex::new(Lru::new(max_open_files.max(1))), Default::default());
        TableCache { dir, mode, tables, open, block_cache }
    }

    /// The open tables, read without a lock: a reader that finds its table here marks it
    /// used ([`Table::mark_used`]) for the clock, and borrows it for as long as it holds the
    /// guard (briefly: a point lookup). Tables opened since may be missing; use
    /// [`TableCache::get`] or [`TableCache::get_open`] then.
    pub fn open_tables(&self) -> arc_swap::Guard<Arc<OpenTables>> {
        self.open.load()
    }

    /// Republishes the open tables after `tables` changed (called under its lock), and tells
    /// the block cache what they hold (see [`BlockCache::charge_readers`]).
    fn publish(&self, tables: &Lru<u64, Arc<Table>>) {
        self.open.store(Arc::new(tables.iter().map(|(n, t)| (*n, Arc::clone(t))).collect()));
        self.block_cache.set_readers_memory(tables.iter().map(|(_, t)| t.memory()).sum());
    }

    /// The open table `number`, opening it if needed.
    pub fn get(&self, number: u64) -> Result<Arc<Table>> {
        if let Some(t) = self.tables.lock().unwrap_or_else(|e| e.into_inner()).get(&number) {
            return Ok(t);
        }
        // Opened outside the lock: opening reads the file's index and filter.
        let path = crate::filename::table_path(&self.dir, number);
        let t = Table::open_with(&path, number, Some(Arc::clone(&self.block_cache)), self.mode)?;
        let mut tables = self.tables.lock().unwrap_or_else(|e| e.into_inner());
        tables.insert_sparing(number, Arc::clone(&t), 1, |t| t.take_used());
        self.publish(&tables);
        drop(tables);
        Ok(t)
    }

    /// The table `number` if it is open (never opens it: no I/O).
    pub fn get_open(&self, number: u64) -> Option<Arc<Table>> {
        self.tables.lock().unwrap_or_else(|e| e.into_inner()).get(&number)
    }

    /// Forgets table `number` and its cached blocks (its file is being deleted).
    pub fn evict(&self, number: u64) {
        let mut tables = self.tables.lock().unwrap_or_else(|e| e.into_inner());
        if tables.remove(&number).is_some() {
            self.publish(&tables);
        }
        drop(tables);
        self.block_cache.evict_file(number);
    }

    /// Number of open tables.
    pub fn len(&self) -> usize {
        self.tables.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// Bytes the open tables hold besides cached blocks (see [`Table::memory`]).
    pub fn readers_memory(&self) -> usize {
        self.open_tables().values().map(|t| t.memory()).sum()
    }

    /// True when no table is open.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The block cache tables read through.
    pub fn block_cache(&self) -> &Arc<BlockCache> {
        &self.block_cache
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Writes a one-entry table numbered `n` into `dir`.
    fn table_file(dir: &std::path::Path, n: u64) {
        let opts = crate::sstable::TableOptions {
            block_size: 4096,
            restart_interval: 16,
            compression: crate::options::Compression::None,
            zstd_level: 3,
            bloom_bits_per_key: 10,
            hash_index: true,
            faults: None,
        };
        let mut b = crate::sstable::TableBuilder::new(Vec::new(), opts).unwrap();
        b.add(&crate::key::make_internal_key(b"k", 1, crate::key::ValueKind::Put), b"v").unwrap();
        let (bytes, _, _) = b.finish().unwrap();
        std::fs::write(crate::filename::table_path(dir, n), bytes).unwrap();
    }

    fn open_numbers(cache: &TableCache) -> Vec<u64> {
        let mut n: Vec<u64> = cache.open_tables().keys().copied().collect();
        n.sort_unstable();
        n
    }

    #[test]
    fn the_lock_free_copy_follows_opens_and_closes_and_reads_through_it_keep_a_table_open() {
        let dir = tempfile::tempdir().unwrap();
        for n in 1..=4 {
            table_file(dir.path(), n);
        }
        let blocks = Arc::new(BlockCache::new(1 << 20, Arc::new(ReadCounters::default())));
        let cache = TableCache::new(dir.path().to_path_buf(), 2, blocks, crate::TableReadMode::Pread);
        cache.get(1).unwrap();
        cache.get(2).unwrap();
        assert_eq!(open_numbers(&cache), [1, 2]);
        // Table 1 is read through the copy only (no `get`): the clock still spares it.
        cache.open_tables()[&1].mark_used();
        cache.get(3).unwrap();
        assert_eq!(open_numbers(&cache), [1, 3], "the unused table closed, the one read stayed");
        // Its mark is spent: next time the clock passes, it goes.
        cache.get(4).unwrap();
        cache.get(2).unwrap();
        assert!(!open_numbers(&cache).contains(&1));
        cache.evict(2);
        assert!(!open_numbers(&cache).contains(&2), "a deleted table leaves the copy");
        assert_eq!(open_numbers(&cache).len(), cache.len());
    }

    #[test]
    fn allocation_sizes_follow_the_allocator_classes() {
        let cases = [(1, 16), (16, 16), (100, 112), (128, 128), (129, 160), (4096, 4096), (4097, 5120), (4101, 5120)];
        for (len, class) in cases {
            assert_eq!(allocation_size(len), class, "{len}");
        }
        for len in 1..20_000 {
            let class = allocation_size(len);
            assert!(class >= len && (class - len) * 4 < len.max(64), "{len} -> {class}");
        }
    }

    #[test]
    fn open_tables_are_charged_to_the_capacity_up_to_half_of_it() {
        // 64 KiB a shard; blocks charged 4096 + 128 each.
        let cache = BlockCache::new(16 << 16, Arc::default());
        let fill = |cache: &BlockCache, file: u64| {
            for i in 0..400 {
                cache.insert(file, i * 4096, Bytes::from(vec![0u8; 4096]));
            }
        };
        fill(&cache, 1);
        let full = cache.usage();
        assert!(full > 15 << 16 && full <= 16 << 16, "{full}");
        // Uncharged (the cache's own default), readers' memory changes nothing.
        cache.set_readers_memory(4 << 16);
        assert_eq!(cache.usage(), full);
        assert_eq!(cache.readers_charge(), 0);
        // Charged: the blocks make room for it.
        cache.charge_readers(true);
        assert_eq!(cache.readers_charge(), 4 << 16);
        assert!(cache.usage() <= 12 << 16 && cache.usage() > 11 << 16, "{}", cache.usage());
        fill(&cache, 2);
        assert!(cache.usage() + cache.readers_charge() <= 16 << 16);
        // Never more than half the capacity, however much the tables hold.
        cache.set_readers_memory(100 << 20);
        assert_eq!(cache.readers_charge(), 8 << 16);
        fill(&cache, 3);
        assert!(cache.usage() <= 8 << 16 && cache.usage() > 7 << 16, "{}", cache.usage());
        // A new capacity keeps the charge: 32 shards' worth of 64 KiB, 4 of them charged.
        cache.set_readers_memory(4 << 16);
        cache.set_capacity(32 << 16);
        fill(&cache, 4);
        fill(&cache, 5);
        assert!(cache.usage() <= 28 << 16 && cache.usage() > 26 << 16, "{}", cache.usage());
        assert_eq!(cache.readers_memory(), 4 << 16);
    }

    #[test]
    fn memtables_are_charged_in_mib_steps_up_to_what_leaves_blocks_a_quarter() {
        // 1 MiB a shard; blocks charged 4096 + 128 each.
        let cache = BlockCache::new(16 << 20, Arc::default());
        let fill = |cache: &BlockCache, file: u64| {
            for i in 0..6000 {
                cache.insert(file, i * 4096, Bytes::from(vec![0u8; 4096]));
            }
        };
        let within = |cache: &BlockCache, mib: usize| {
            let usage = cache.usage();
            assert!(usage <= mib << 20 && usage > (mib << 20) - (16 << 13), "{usage} vs {mib} MiB");
        };
        fill(&cache, 1);
        within(&cache, 16);
        // Uncharged (the cache's own default), the memtables' memory changes nothing.
        cache.set_memtables_memory(5 << 20);
        assert_eq!(cache.memtables_charge(), 0);
        within(&cache, 16);
        // Charged: the blocks make room for it, a whole MiB at a time.
        cache.charge_memtables(true);
        assert_eq!(cache.memtables_charge(), 5 << 20);
        within(&cache, 11);
        cache.set_memtables_memory((6 << 20) - 1);
        assert_eq!(cache.memtables_charge(), 5 << 20);
        cache.set_memtables_memory(6 << 20);
        within(&cache, 10);
        // With the readers charged too, both together stop at three quarters of the capacity.
        cache.charge_readers(true);
        cache.set_readers_memory(4 << 20);
        cache.set_memtables_memory(100 << 20);
        assert_eq!((cache.readers_charge(), cache.memtables_charge()), (4 << 20, 8 << 20));
        fill(&cache, 2);
        within(&cache, 4);
        // A flushed memtable gives its room back.
        cache.set_memtables_memory(0);
        fill(&cache, 3);
        within(&cache, 12);
    }

    #[test]
    fn a_table_cache_reports_its_tables_memory_to_the_block_cache() {
        let dir = tempfile::tempdir().unwrap();
        for n in 1..=3 {
            table_file(dir.path(), n);
        }
        let blocks = Arc::new(BlockCache::new(1 << 20, Arc::new(ReadCounters::default())));
        blocks.charge_readers(true);
        let cache = TableCache::new(dir.path().to_path_buf(), 2, Arc::clone(&blocks), crate::TableReadMode::Pread);
        assert_eq!(blocks.readers_memory(), 0);
        let one = cache.get(1).unwrap().memory();
        assert!(one > 0);
        assert_eq!(blocks.readers_memory(), one);
        cache.get(2).unwrap();
        cache.get(3).unwrap();
        assert_eq!(blocks.readers_memory(), cache.readers_memory(), "two tables open (at most 2)");
        assert_eq!(blocks.readers_charge(), cache.readers_memory());
        cache.evict(2);
        cache.evict(3);
        assert_eq!(blocks.readers_memory(), cache.readers_memory());
    }

    #[test]
    fn the_cache_charges_what_blocks_occupy() {
        let cache = BlockCache::new(1 << 20, Arc::default());
        cache.insert(1, 0, Bytes::from(vec![0u8; 4097]));
        cache.insert(1, 4097, Bytes::from(vec![0u8; 4096]));
        assert_eq!(cache.usage(), 5120 + 128 + 4096 + 128);
    }
}
