//! Options for opening a database, reading and writing.

use std::sync::Arc;

use crate::compaction::CompactionFilter;

mod per_call;
pub use per_call::{ReadOptions, WriteOptions};

/// Block compression codec.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Compression {
    /// Blocks stored raw.
    None = 0,
    /// Snappy (`snap` crate). Needs the `snappy` feature.
    Snappy = 1,
    /// Zstandard (`zstd` crate). Needs the `zstd` feature.
    Zstd = 2,
}

impl Compression {
    /// Decodes the on-disk codec byte.
    pub fn from_u8(b: u8) -> Option<Compression> {
        match b {
            0 => Some(Compression::None),
            1 => Some(Compression::Snappy),
            2 => Some(Compression::Zstd),
            _ => None,
        }
    }

    /// The codec's name as db_bench and the server's config spell it.
    pub fn name(self) -> &'static str {
        match self {
            Compression::None => "none",
            Compression::Snappy => "snappy",
            Compression::Zstd => "zstd",
        }
    }

    /// True when this build can read and write the codec.
    pub fn is_available(self) -> bool {
        match self {
            Compression::None => true,
            Compression::Snappy => cfg!(feature = "snappy"),
            Compression::Zstd => cfg!(feature = "zstd"),
        }
    }
}

impl std::str::FromStr for Compression {
    type Err = crate::Error;
    fn from_str(s: &str) -> crate::Result<Self> {
        match s.to_ascii_lowercase().as_str() {
            "none" | "no" => Ok(Compression::None),
            "snappy" => Ok(Compression::Snappy),
            "zstd" => Ok(Compression::Zstd),
            other => Err(crate::Error::InvalidArgument(format!("unknown compression '{other}' (none, snappy, zstd)"))),
        }
    }
}

/// When the WAL is fsynced (the server maps Redis's `appendfsync` onto this).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum SyncMode {
    /// Every write group is fsynced before it is acknowledged (`appendfsync always`).
    Always,
    /// A background thread fsyncs once a second (`appendfsync everysec`); writes asking for
    /// [`WriteOptions::sync`] are still fsynced before they return.
    EverySec,
    /// Only writes asking for [`WriteOptions::sync`] are fsynced (`appendfsync no`).
    Never,
}

/// How tables are read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TableReadMode {
    /// Each table is memory-mapped: uncompressed blocks are read in place from the page cache
    /// (no copy, no block-cache memory), compressed ones are decompressed into the block cache.
    /// The mapped pages count in the process's RSS (as file-backed memory the kernel may drop).
    Mmap,
    /// Blocks are read with `pread` into the block cache (RocksDB's default): the memory the
    /// engine uses is bounded by `block_cache_size` plus indexes and filters; every block read
    /// from the file is checksummed.
    #[default]
    Pread,
}

impl std::str::FromStr for TableReadMode {
    type Err = crate::Error;

    fn from_str(s: &str) -> crate::Result<Self> {
        match s.to_ascii_lowercase().as_str() {
            "mmap" => Ok(TableReadMode::Mmap),
            "pread" => Ok(TableReadMode::Pread),
            _ => Err(crate::Error::InvalidArgument(format!("unknown table read mode '{s}' (mmap or pread)"))),
        }
    }
}

/// What recovery does with a damaged WAL record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WalRecoveryMode {
    /// A bad or partial record at the very end of the newest WAL (a torn write) is cut off with a
    /// warning; damage anywhere before that is an error. The default.
    TolerateCorruptedTail,
    /// Any damage is an error, even a torn tail.
    AbsoluteConsistency,
    /// Recover up to the first damaged record and drop everything after it.
    PointInTime,
    /// Recover every intact record, skipping damaged ones (the database may then miss writes
    /// in the middle of its history): for salvaging data, logged record by record.
    SkipAnyCorruptedRecords,
}

/// Options for [`crate::Db::open`]. Every setter states its default.
#[derive(Debug, Clone)]
pub struct Options {
    pub(crate) create_if_missing: bool,
    pub(crate) error_if_exists: bool,
    pub(crate) write_buffer_size: usize,
    pub(crate) max_write_buffer_number: usize,
    pub(crate) block_size: usize,
    pub(crate) block_restart_interval: usize,
    pub(crate) compression: Compression,
    pub(crate) zstd_level: i32,
    pub(crate) bloom_bits_per_key: u32,
    pub(crate) data_block_hash_index: bool,
    pub(crate) sync_mode: SyncMode,
    pub(crate) wal_recovery_mode: WalRecoveryMode,
    pub(crate) max_manifest_file_size: u64,
    pub(crate) level0_file_num_compaction_trigger: usize,
    pub(crate) level0_slowdown_writes_trigger: usize,
    pub(crate) level0_stop_writes_trigger: usize,
    pub(crate) max_bytes_for_level_base: u64,
    pub(crate) max_bytes_for_level_multiplier: u64,
    pub(crate) target_file_size_base: u64,
    pub(crate) max_background_compactions: usize,
    pub(crate) disable_auto_compactions: bool,
    pub(crate) compaction_rate_limit: u64,
    pub(crate) faults: Option<Arc<dyn crate::fault::FaultInjector>>,
    pub(crate) block_cache_size: usize,
    pub(crate) row_cache_size: usize,
    pub(crate) prepopulate_block_cache: bool,
    pub(crate) charge_table_readers: bool,
    pub(crate) charge_memtables: bool,
    pub(crate) table_read_mode: TableReadMode,
    pub(crate) max_open_files: usize,
    pub(crate) compaction_filter: Option<FilterHandle>,
    pub(crate) wal_ttl: std::time::Duration,
    pub(crate) wal_size_limit: u64,
    pub(crate) memory_release: Option<ReleaseHook>,
}

/// What the application runs once a flushed memtable's memory is freed.
#[derive(Clone)]
pub(crate) struct ReleaseHook(pub(crate) Arc<dyn Fn() + Send + Sync>);

impl std::fmt::Debug for ReleaseHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ReleaseHook")
    }
}

/// A user compaction filter, shared by every compaction.
#[derive(Clone)]
pub(crate) struct FilterHandle(pub(crate) Arc<dyn CompactionFilter>);

impl std::fmt::Debug for FilterHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CompactionFilter({})", self.0.name())
    }
}

impl Default for Options {
    fn default() -> Self {
        let compression = if cfg!(feature = "snappy") { Compression::Snappy } else { Compression::None };
        Options {
            create_if_missing: true,
            error_if_exists: false,
            write_buffer_size: 64 << 20,
            max_write_buffer_number: 2,
            block_size: 4096,
            block_restart_interval: 16,
            compression,
            zstd_level: 3,
            bloom_bits_per_key: 10,
            data_block_hash_index: true,
            sync_mode: SyncMode::EverySec,
            wal_recovery_mode: WalRecoveryMode::TolerateCorruptedTail,
            max_manifest_file_size: 64 << 20,
            level0_file_num_compaction_trigger: 4,
            level0_slowdown_writes_trigger: 20,
            level0_stop_writes_trigger: 36,
            max_bytes_for_level_base: 256 << 20,
            max_bytes_for_level_multiplier: 10,
            target_file_size_base: 64 << 20,
            max_background_compactions: 1,
            disable_auto_compactions: false,
            compaction_rate_limit: 0,
            faults: None,
            block_cache_size: 64 << 20,
            row_cache_size: 0,
            prepopulate_block_cache: false,
            charge_table_readers: true,
            charge_memtables: false,
            table_read_mode: TableReadMode::default(),
            max_open_files: 1000,
            compaction_filter: None,
            memory_release: None,
            wal_ttl: std::time::Duration::ZERO,
            wal_size_limit: 0,
        }
    }
}

impl Options {
    /// Create the directory and a new database when none exists (default `true`).
    #[must_use]
    pub fn create_if_missing(mut self, v: bool) -> Self {
        self.create_if_missing = v;
        self
    }
    /// Fail to open when a database already exists (default `false`).
    #[must_use]
    pub fn error_if_exists(mut self, v: bool) -> Self {
        self.error_if_exists = v;
        self
    }
    /// Bytes a memtable may use before it is frozen and flushed (default 64 MiB, minimum 4 KiB):
    /// its entries and its bloom filter and point index, which are sized from it (up to about a
    /// seventh of it, less when the previous memtable's entries were larger than 80 bytes; see
    /// `Db::memory_usage`), as RocksDB counts a memtable's whole arena.
    #[must_use]
    pub fn write_buffer_size(mut self, bytes: usize) -> Self {
        self.write_buffer_size = bytes.max(4096);
        self
    }
    /// Memtables (active plus frozen) before writers stall waiting for a flush (default 2, min 2).
    #[must_use]
    pub fn max_write_buffer_number(mut self, n: usize) -> Self {
        self.max_write_buffer_number = n.max(2);
        self
    }
    /// Target uncompressed size of a data block (default 4 KiB).
    #[must_use]
    pub fn block_size(mut self, bytes: usize) -> Self {
        self.block_size = bytes.max(64);
        self
    }
    /// Entries between restart points in a data block (default 16).
    #[must_use]
    pub fn block_restart_interval(mut self, n: usize) -> Self {
        self.block_restart_interval = n.max(1);
        self
    }
    /// Give new data blocks a hash index of their user keys (default `true`): a point lookup
    /// then finds its key's restart interval from one bucket instead of binary-searching the
    /// restart points (RocksDB's `kDataBlockBinaryAndHash`), for about one byte per 1.3 keys.
    /// Tables are readable either way.
    #[must_use]
    pub fn data_block_hash_index(mut self, v: bool) -> Self {
        self.data_block_hash_index = v;
        self
    }
    /// Codec for new data blocks (default snappy when compiled in, else none).
    #[must_use]
    pub fn compression(mut self, c: Compression) -> Self {
        self.compression = c;
        self
    }
    /// zstd level for new blocks (default 3).
    #[must_use]
    pub fn zstd_level(mut self, level: i32) -> Self {
        self.zstd_level = level;
        self
    }
    /// Bloom filter bits per key; 0 disables filters (default 10, about 1 % false positives).
    #[must_use]
    pub fn bloom_bits_per_key(mut self, bits: u32) -> Self {
        self.bloom_bits_per_key = bits;
        self
    }
    /// WAL fsync policy (default [`SyncMode::EverySec`]).
    #[must_use]
    pub fn sync_mode(mut self, mode: SyncMode) -> Self {
        self.sync_mode = mode;
        self
    }
    /// How recovery treats damaged WAL records (default [`WalRecoveryMode::TolerateCorruptedTail`]).
    #[must_use]
    pub fn wal_recovery_mode(mut self, mode: WalRecoveryMode) -> Self {
        self.wal_recovery_mode = mode;
        self
    }
    /// Size at which the manifest is rewritten as one snapshot record (default 64 MiB).
    #[must_use]
    pub fn max_manifest_file_size(mut self, bytes: u64) -> Self {
        self.max_manifest_file_size = bytes.max(1024);
        self
    }

    /// L0 tables that trigger an L0→L1 compaction (default 4).
    #[must_use]
    pub fn level0_file_num_compaction_trigger(mut self, n: usize) -> Self {
        self.level0_file_num_compaction_trigger = n.max(1);
        self
    }
    /// L0 tables at which each write group is delayed by 1 ms (default 20).
    #[must_use]
    pub fn level0_slowdown_writes_trigger(mut self, n: usize) -> Self {
        self.level0_slowdown_writes_trigger = n.max(1);
        self
    }
    /// L0 tables at which writes wait for compaction (default 36).
    #[must_use]
    pub fn level0_stop_writes_trigger(mut self, n: usize) -> Self {
        self.level0_stop_writes_trigger = n.max(2);
        self
    }
    /// Target size of L1; each deeper level is `max_bytes_for_level_multiplier` times bigger
    /// (default 256 MiB).
    #[must_use]
    pub fn max_bytes_for_level_base(mut self, bytes: u64) -> Self {
        self.max_bytes_for_level_base = bytes.max(4096);
        self
    }
    /// Size ratio between adjacent levels (default 10).
    #[must_use]
    pub fn max_bytes_for_level_multiplier(mut self, m: u64) -> Self {
        self.max_bytes_for_level_multiplier = m.max(2);
        self
    }
    /// Size at which compaction starts a new output table (default 64 MiB).
    #[must_use]
    pub fn target_file_size_base(mut self, bytes: u64) -> Self {
        self.target_file_size_base = bytes.max(1024);
        self
    }
    /// Background compaction threads (default 1; a flush thread runs beside them).
    #[must_use]
    pub fn max_background_compactions(mut self, n: usize) -> Self {
        self.max_background_compactions = n.max(1);
        self
    }
    /// Turn off background compaction; `compact_range` still works (default `false`).
    #[must_use]
    pub fn disable_auto_compactions(mut self, v: bool) -> Self {
        self.disable_auto_compactions = v;
        self
    }
    /// Most bytes per second compactions write, to keep their I/O from crowding out foreground
    /// reads (RocksDB's `rate_limiter` for compaction); 0 means unlimited (the default). A
    /// throttled compaction still stops promptly when the database closes.
    #[must_use]
    pub fn compaction_rate_limit(mut self, bytes_per_sec: u64) -> Self {
        self.compaction_rate_limit = bytes_per_sec;
        self
    }
    /// A [`crate::fault::FaultInjector`] asked before every durable file operation (tests;
    /// default none).
    #[must_use]
    pub fn fault_injector(mut self, faults: Arc<dyn crate::fault::FaultInjector>) -> Self {
        self.faults = Some(faults);
        self
    }
    /// Bytes of decompressed blocks kept in the block cache (default 64 MiB).
    #[must_use]
    pub fn block_cache_size(mut self, bytes: usize) -> Self {
        self.block_cache_size = bytes;
        self
    }

    /// Charge the open tables' indexes and bloom filters to the block cache (default `true`;
    /// RocksDB's `charge_table_reader`, off there by default): blocks get
    /// `block_cache_size` less the tables' memory, so the block cache's size bounds both —
    /// without it, a database's table metadata (~1.5 bytes per entry at 10 bloom bits a key)
    /// comes on top of the cache and grows with the data. The charge is capped at half the
    /// cache, so that a database whose metadata outgrows the cache still caches blocks.
    #[must_use]
    pub fn charge_table_readers(mut self, v: bool) -> Self {
        self.charge_table_readers = v;
        self
    }

    /// Charge the memtables (active and frozen, with their bloom filters and point indexes)
    /// to the block cache (default `false`; RocksDB's `cost_write_buffer_to_cache`): blocks get
    /// `block_cache_size` less what the memtables hold, so the cache's size bounds blocks,
    /// table metadata and memtables together, and memory no longer depends on how full the
    /// memtable happens to be. Both charges together are capped at three quarters of the
    /// cache, so blocks always keep a quarter of it.
    #[must_use]
    pub fn charge_memtables(mut self, v: bool) -> Self {
        self.charge_memtables = v;
        self
    }

    /// Bytes of rows kept in the row cache (default 0: none; RocksDB's `row_cache`). A row is
    /// a key's newest version in one table, found by a point lookup: the next lookup of that
    /// key in that table reads it from there, past the table's index and data block, after
    /// the bloom filter. Worth it when a set of hot keys is read from tables again and again
    /// (a server's working set); a read of keys seldom read twice only pays the copy.
    #[must_use]
    pub fn row_cache_size(mut self, bytes: usize) -> Self {
        self.row_cache_size = bytes;
        self
    }

    /// Put the data blocks of every table a flush writes into the block cache as they are
    /// written (RocksDB's `prepopulate_block_cache = kFlushOnly`; default `false`). Recent
    /// writes are the likeliest reads, and a read of a just-flushed key then finds its block
    /// in memory instead of reading the file: the first read of each block after a flush is
    /// a hit, which a cache-only read ([`ReadOptions::cache_only`]) needs to succeed at all.
    /// A memtable holding range deletions is not put in: what it holds is mostly data just
    /// dropped (a deleted collection, a cleared key range), which would otherwise take the
    /// cache's memory until compaction. (Whatever this option, a flush opens the table it
    /// wrote, its index and filter loaded, as a read would.)
    /// Blocks read in place from a memory map are not cached (see [`TableReadMode`]), so with
    /// `Mmap` only compressed blocks are put in. Compaction outputs are not: what they hold
    /// was in the cache already, under the numbers of the tables they replace, if it was hot.
    #[must_use]
    pub fn prepopulate_block_cache(mut self, v: bool) -> Self {
        self.prepopulate_block_cache = v;
        self
    }

    /// How tables are read: `pread` into the block cache (default) or memory-mapped.
    pub fn table_read_mode(mut self, mode: TableReadMode) -> Self {
        self.table_read_mode = mode;
        self
    }
    /// Tables kept open (memory-mapped with index and filter loaded) at once (default 1000).
    #[must_use]
    pub fn max_open_files(mut self, n: usize) -> Self {
        self.max_open_files = n.max(1);
        self
    }
    /// A filter every compaction runs over the newest version of each key (default none).
    #[must_use]
    pub fn compaction_filter(mut self, filter: Arc<dyn CompactionFilter>) -> Self {
        self.compaction_filter = Some(FilterHandle(filter));
        self
    }

    /// Keep WAL files this long after their memtable is flushed, so replicas can catch up with
    /// [`crate::Db::updates_since`] (default 0: deleted at once unless `wal_size_limit` is set).
    #[must_use]
    pub fn wal_ttl(mut self, ttl: std::time::Duration) -> Self {
        self.wal_ttl = ttl;
        self
    }
    /// Keep flushed WAL files up to this many bytes in all, oldest deleted first (default 0: no
    /// size bound; with `wal_ttl` also 0, WALs are deleted at once).
    #[must_use]
    pub fn wal_size_limit(mut self, bytes: u64) -> Self {
        self.wal_size_limit = bytes;
        self
    }

    /// Runs `release` on the flush thread each time a flushed memtable's memory has been freed
    /// (a memtable still read by an open iterator is freed later), and on a compaction thread
    /// each time a compaction has finished: a place to hand the allocator's freed pages back to
    /// the OS: [`crate::allocator`] has hooks for jemalloc and glibc's malloc, neither of which
    /// does it soon by itself.
    pub fn memory_release(mut self, release: Arc<dyn Fn() + Send + Sync>) -> Self {
        self.memory_release = Some(ReleaseHook(release));
        self
    }

    pub(crate) fn retains_wals(&self) -> bool {
        !self.wal_ttl.is_zero() || self.wal_size_limit > 0
    }

    pub(crate) fn validate(&self) -> crate::Result<()> {
        if !self.compression.is_available() {
            let feature = if self.compression == Compression::Snappy { "snappy" } else { "zstd" };
            return Err(crate::Error::CodecUnavailable(self.compression.name(), feature));
        }
        Ok(())
    }
}

/// Options that may change while the database is open (RocksDB's `SetOptions`), applied by
/// [`Db::set_options`](crate::Db::set_options); a field left `None` keeps its value.
///
/// When each change takes effect: `write_buffer_size` from the next check of the active
/// memtable (a smaller size rotates it at the next write); the L0 triggers and
/// `disable_auto_compactions` at once (writers waiting in a stall look again, the compaction
/// threads wake); `compaction_rate_limit` and `compression` for compactions and flushes that
/// start afterwards (tables already written keep their codec: every block says which it
/// uses); `block_cache_size` and `row_cache_size` at once (shrinking evicts); `wal_ttl` and `wal_size_limit` at the
/// next retention check.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MutableOptions {
    /// See [`Options::write_buffer_size`].
    pub write_buffer_size: Option<usize>,
    /// See [`Options::level0_file_num_compaction_trigger`].
    pub level0_file_num_compaction_trigger: Option<usize>,
    /// See [`Options::level0_slowdown_writes_trigger`].
    pub level0_slowdown_writes_trigger: Option<usize>,
    /// See [`Options::level0_stop_writes_trigger`].
    pub level0_stop_writes_trigger: Option<usize>,
    /// See [`Options::disable_auto_compactions`].
    pub disable_auto_compactions: Option<bool>,
    /// See [`Options::compaction_rate_limit`].
    pub compaction_rate_limit: Option<u64>,
    /// See [`Options::compression`].
    pub compression: Option<Compression>,
    /// See [`Options::block_cache_size`].
    pub block_cache_size: Option<usize>,
    /// See [`Options::row_cache_size`] (changes the size of a row cache the database opened
    /// with; a database opened without one keeps none).
    pub row_cache_size: Option<usize>,
    /// See [`Options::wal_ttl`].
    pub wal_ttl: Option<std::time::Duration>,
    /// See [`Options::wal_size_limit`].
    pub wal_size_limit: Option<u64>,
}

impl MutableOptions {
    /// `base` with the changes applied.
    pub(crate) fn apply_to(&self, base: &Options) -> Options {
        let mut o = base.clone();
        macro_rules! set {
            ($($f:ident),*) => { $( if let Some(v) = self.$f { o.$f = v; } )* };
        }
        set!(
            write_buffer_size,
            level0_file_num_compaction_trigger,
            level0_slowdown_writes_trigger,
            level0_stop_writes_trigger,
            disable_auto_compactions,
            compaction_rate_limit,
            compression,
            block_cache_size,
            row_cache_size,
            wal_ttl,
            wal_size_limit
        );
        o
    }
}
