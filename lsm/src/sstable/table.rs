//! Reading a table: through a memory map (the table's bytes are the page cache's, read in
//! place) or with `pread` into the block cache (memory the engine owns and bounds), as
//! [`crate::TableReadMode`] says.

use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;

use super::block::{self, Block, BlockIter, BlockOrigin};
use super::bloom;
use super::format::{read_block_checked, BlockHandle, Footer, TableProperties, FOOTER_LEN};
use super::index::Index;
use super::source::Source;
use super::{META_FILTER, META_PROPERTIES, META_RANGE_DEL};
use crate::cache::BlockCache;
use crate::iter::InternalIterator;
use crate::key::{self, ValueKind};
use crate::memtable::Lookup;
use crate::range_del::{Fragments, RangeTombstone, Region, TombstoneSource};
use crate::{Error, Result};

/// An open table: its bytes (mapped, or read on demand), its index and bloom filter pinned.
#[derive(Debug)]
pub struct Table {
    data: Source,
    path: Arc<Path>,
    number: u64,
    index: Index,
    filter: Option<Bytes>,
    props: TableProperties,
    cache: Option<Arc<BlockCache>>,
    range_dels: Vec<RangeTombstone>,
    fragments: Fragments,
    /// One bit per data block: raw blocks are read in place and their checksum is verified the
    /// first time each is read, not every time.
    verified: Vec<std::sync::atomic::AtomicU64>,
    /// Read since the table cache's clock last passed it (see `TableCache::open_tables`).
    used: std::sync::atomic::AtomicBool,
}

impl TombstoneSource for Table {
    fn tombstone_region(&self, key: &[u8], upper: u64) -> Region {
        self.fragments.region(key, upper)
    }
}

impl Table {
    /// Maps the file at `path` and checks its footer, index, filter and properties.
    pub fn open(path: &Path) -> Result<Arc<Table>> {
        Self::open_cached(path, 0, None)
    }

    /// [`Table::open`] for table `number`, memory-mapped, reading compressed blocks through
    /// `cache`.
    pub fn open_cached(path: &Path, number: u64, cache: Option<Arc<BlockCache>>) -> Result<Arc<Table>> {
        Self::open_with(path, number, cache, crate::TableReadMode::Mmap)
    }

    /// Opens table `number` the way `mode` says: mapped (raw blocks read in place, compressed
    /// ones decompressed into `cache`) or read with `pread` (every data block goes through
    /// `cache`; the index, filter and properties are read once at open).
    pub fn open_with(
        path: &Path,
        number: u64,
        cache: Option<Arc<BlockCache>>,
        mode: crate::TableReadMode,
    ) -> Result<Arc<Table>> {
        let file = std::fs::File::open(path)?;
        let len = file.metadata()?.len();
        if len < FOOTER_LEN as u64 {
            return Err(Error::corruption(path, 0, format!("file of {len} bytes is too short to be a table")));
        }
        let source = match mode {
            crate::TableReadMode::Pread => Source::File { file, len },
            crate::TableReadMode::Mmap => {
                // SAFETY: table files are immutable once written and renamed into place; the
                // engine never writes to or truncates a live table, so the mapping's contents do
                // not change under us.
                let map = unsafe { memmap2::Mmap::map(&file)? };
                Source::Mapped(Bytes::from_owner(map))
            }
        };
        Self::load(source, path, number, cache)
    }

    /// Opens a table held in memory (tests and benchmarks).
    pub fn from_bytes(data: Bytes, path: &Path) -> Result<Arc<Table>> {
        Self::load(Source::Mapped(data), path, 0, None)
    }

    fn load(data: Source, path: &Path, number: u64, cache: Option<Arc<BlockCache>>) -> Result<Arc<Table>> {
        let n = data.len();
        let footer_at = n
            .checked_sub(FOOTER_LEN as u64)
            .ok_or_else(|| Error::corruption(path, 0, format!("file of {n} bytes is too short to be a table")))?;
        let footer = Footer::decode_tail(&data.read(footer_at, FOOTER_LEN, path)?, footer_at, path)?;
        let path: Arc<Path> = Arc::from(path);
        let load = |h: BlockHandle| -> Result<Block> {
            let bytes = data.block(h, &path, true)?;
            Block::new(bytes, BlockOrigin { file: Arc::clone(&path), offset: h.offset })
        };
        let index = Index::decode(&load(footer.index)?, &path, footer.index.offset)?;
        let meta = load(footer.metaindex)?;
        let (mut filter, mut props, mut range_dels) = (None, None, Vec::new());
        let mut it = meta.iter();
        it.seek_to_first()?;
        while it.valid() {
            let h = BlockHandle::decode(it.value()).ok_or_else(|| {
                Error::corruption(path.to_path_buf(), footer.metaindex.offset, "bad meta-index handle")
            })?;
            match it.key() {
                META_FILTER => filter = Some(data.block(h, &path, true)?),
                META_RANGE_DEL => {
                    let block = load(h)?;
                    let mut rd = block.iter();
                    rd.seek_to_first()?;
                    while rd.valid() {
                        let p = key::parse(rd.key())
                            .filter(|p| p.kind == ValueKind::RangeDelete)
                            .ok_or_else(|| Error::corruption(path.to_path_buf(), h.offset, "bad range tombstone"))?;
                        range_dels.push(RangeTombstone {
                            start: p.user_key.to_vec(),
                            end: rd.value().to_vec(),
                            seq: p.seq,
                        });
                        rd.next()?;
                    }
                }
                META_PROPERTIES => {
                    let raw = data.block(h, &path, true)?;
                    props = Some(
                        TableProperties::decode(&raw)
                            .ok_or_else(|| Error::corruption(path.to_path_buf(), h.offset, "bad properties block"))?,
                    );
                }
                _ => {}
            }
            it.next()?;
        }
        let props = props.ok_or_else(|| {
            Error::corruption(path.to_path_buf(), footer.metaindex.offset, "table has no properties block")
        })?;
        let fragments = Fragments::new(&range_dels, u64::MAX);
        let verified = (0..index.len().div_ceil(64)).map(|_| std::sync::atomic::AtomicU64::new(0)).collect();
        let used = std::sync::atomic::AtomicBool::new(false);
        Ok(Arc::new(Table { data, path, number, index, filter, props, cache, range_dels, fragments, verified, used }))
    }

    /// Marks the table read, for the table cache's clock (written only when it changes, so
    /// threads reading a hot table do not bounce its cache line).
    pub(crate) fn mark_used(&self) {
        use std::sync::atomic::Ordering::Relaxed;
        if !self.used.load(Relaxed) {
            self.used.store(true, Relaxed);
        }
    }

    /// Whether the table was read since the last call (the clock's second chance).
    pub(crate) fn take_used(&self) -> bool {
        use std::sync::atomic::Ordering::Relaxed;
        self.used.load(Relaxed) && self.used.swap(false, Relaxed)
    }

    /// Bytes this open table holds in memory besides its cached blocks: the decoded index, the
    /// bloom filter, the range tombstones and the verified-block bits (RocksDB's
    /// `estimate-table-readers-mem`).
    pub fn memory(&self) -> usize {
        let tombstones: usize = self.range_dels.iter().map(|t| t.start.capacity() + t.end.capacity() + 56).sum();
        self.index.memory()
            + self.filter.as_ref().map_or(0, |f| f.len())
            + tombstones
            + self.fragments.memory()
            + self.verified.capacity() * 8
    }

    /// The table's properties.
    pub fn properties(&self) -> &TableProperties {
        &self.props
    }

    /// Sizes of the data blocks as stored (before the trailer).
    #[cfg(test)]
    pub(crate) fn block_sizes_for_test(&self) -> Vec<u64> {
        (0..self.index.len()).map(|i| self.index.handle(i).size).collect()
    }

    /// Bytes of the bloom filter (0 without one).
    #[cfg(test)]
    pub(crate) fn filter_len_for_test(&self) -> usize {
        self.filter.as_ref().map_or(0, |f| f.len())
    }

    #[cfg(test)]
    pub(crate) fn data_for_test(&self) -> &Bytes {
        match &self.data {
            Source::Mapped(b) => b,
            Source::File { .. } => panic!("a pread table has no bytes in memory"),
        }
    }

    /// The table's range tombstones.
    pub fn range_tombstones(&self) -> &[RangeTombstone] {
        &self.range_dels
    }

    /// The newest range tombstone in this table covering `user_key` with sequence `<= seq`.
    pub fn max_covering_tombstone(&self, user_key: &[u8], seq: u64) -> Option<u64> {
        self.fragments.max_covering(user_key, seq)
    }

    /// The table's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Size of the file in bytes.
    pub fn file_size(&self) -> u64 {
        self.data.len()
    }

    /// True unless the bloom filter proves `user_key` is absent.
    pub fn may_contain(&self, key_hash: u64) -> bool {
        let Some(f) = &self.filter else { return true };
        let maybe = bloom::may_contain(f, key_hash);
        if let Some(c) = &self.cache {
            let c = c.counters().local();
            c.bloom_checks.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            if !maybe {
                c.bloom_useful.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
        }
        maybe
    }

    /// Starts loading the filter line a lookup of the key whose hash is `key_hash` reads (not
    /// for a mapped table, whose filter is pages that may not be resident).
    pub fn prefetch_filter(&self, key_hash: u64) {
        if let Some(f) = self.filter.as_ref().filter(|_| !self.is_mapped()) {
            bloom::prefetch(f, key_hash);
        }
    }

    /// True if the table's bytes are read in place from a mapping (whose pages may fault).
    fn is_mapped(&self) -> bool {
        matches!(self.data, Source::Mapped(_))
    }

    /// Reads a data block. Mapped: raw blocks in place, compressed ones through the cache.
    /// pread: every block through the cache (checked when read from the file). A cache-only
    /// fetch takes the block from the block cache or fails with [`Error::WouldBlock`].
    fn read_data_block(&self, ordinal: usize, fetch: Fetch) -> Result<Block> {
        let bytes = self.data_block_bytes(ordinal, fetch)?;
        let origin = BlockOrigin { file: Arc::clone(&self.path), offset: self.index.handle(ordinal).offset };
        Block::new(bytes, origin)
    }

    /// The bytes of data block `ordinal` (see [`Table::read_data_block`]), not yet checked to
    /// be a block.
    fn data_block_bytes(&self, ordinal: usize, fetch: Fetch) -> Result<Bytes> {
        let fill_cache = fetch.fill_cache;
        let h = self.index.handle(ordinal);
        if fetch.cache_only {
            // A mapped table's bytes (even the codec byte that says whether the block is cached)
            // are pages that may fault: memory-only readers do not touch them.
            let cached = self
                .cache
                .as_ref()
                .filter(|_| !self.is_mapped())
                .and_then(|c| c.get(self.number, h.offset, fill_cache));
            return match cached {
                Some(b) => Ok(b),
                None => Err(Error::WouldBlock),
            };
        }
        let map = match &self.data {
            Source::Mapped(b) => Some(b),
            Source::File { .. } => None,
        };
        let codec_at = h.offset.checked_add(h.size).and_then(|e| usize::try_from(e).ok());
        let cached = match map {
            Some(b) => codec_at.and_then(|at| b.get(at)).is_some_and(|&c| c != 0),
            None => true,
        };
        let cache = self.cache.as_ref().filter(|_| cached);
        if let Some(cache) = cache {
            if let Some(b) = cache.get(self.number, h.offset, fill_cache) {
                return Ok(b);
            }
        }
        let Some(map) = map.filter(|_| !cached) else {
            let bytes = self.data.block(h, &self.path, true)?;
            if let Some(cache) = cache.filter(|_| fill_cache) {
                cache.insert(self.number, h.offset, bytes.clone());
            }
            return Ok(bytes);
        };
        use std::sync::atomic::Ordering::Relaxed;
        let (w, m) = (ordinal / 64, 1u64 << (ordinal % 64));
        let seen = self.verified[w].load(Relaxed) & m != 0;
        let bytes = read_block_checked(map, h, &self.path, !seen)?;
        if !seen {
            // (Written once: threads reading a hot table do not bounce its cache line.)
            self.verified[w].fetch_or(m, Relaxed);
        }
        Ok(bytes)
    }

    /// The newest version of `user_key` with sequence number `<= seq`, if this table has one.
    /// `key_hash` is [`bloom::hash_key`] of `user_key`, computed once per lookup by the caller.
    pub fn get(self: &Arc<Self>, user_key: &[u8], seq: u64, key_hash: u64) -> Result<Option<Lookup>> {
        self.get_fetch(user_key, seq, key_hash, PointFetch::default())
    }

    /// [`Table::get`] the way `fetch` says: with `cache_only`, from memory only (a mapped
    /// table, whose filter and blocks are pages that may fault, or a data block not in the
    /// block cache gives [`Error::WouldBlock`]); without `fill_row_cache`, a row found in the
    /// blocks is not added to the row cache.
    pub fn get_fetch(
        self: &Arc<Self>,
        user_key: &[u8],
        seq: u64,
        key_hash: u64,
        fetch: PointFetch,
    ) -> Result<Option<Lookup>> {
        let cache_only = fetch.cache_only;
        // The row cache holds this table's newest version of a key: a read that sees every
        // version in the table may take it from there.
        let rows = self.cache.as_deref().and_then(BlockCache::rows).filter(|_| seq >= self.props.largest_seq);
        if cache_only && self.is_mapped() {
            return rows.and_then(|r| r.get(self.number, key_hash, user_key)).map(Some).ok_or(Error::WouldBlock);
        }
        if !self.may_contain(key_hash) {
            return Ok(None);
        }
        if let Some(rows) = rows {
            let hit = rows.get(self.number, key_hash, user_key);
            if let Some(c) = &self.cache {
                let c = c.counters().local();
                let counter = if hit.is_some() { &c.row_cache_hits } else { &c.row_cache_misses };
                counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            if hit.is_some() {
                return Ok(hit);
            }
        }
        let found = self.search(user_key, seq, key_hash, cache_only)?;
        if let (Some(rows), Some(found)) = (rows.filter(|_| fetch.fill_row_cache), &found) {
            rows.insert(self.number, key_hash, user_key, found);
        }
        Ok(found)
    }

    /// The newest version of `user_key` at or below `seq` in the table's blocks (see
    /// [`Table::get_fetch`], which checked the filter).
    fn search(&self, user_key: &[u8], seq: u64, key_hash: u64, cache_only: bool) -> Result<Option<Lookup>> {
        // A point lookup searches the blocks themselves, with no cursor: a cursor takes
        // reference counts on the table and its block, and threads reading one hot table would
        // bounce their cache lines.
        let target = key::seek_key(user_key, seq);
        let mut found = Vec::with_capacity(target.len() + 16);
        // The first block whose separator is >= target holds the first entry >= target, unless
        // every entry of it is smaller (target falls between its last key and its separator):
        // then that entry starts the next block.
        for ordinal in self.index.find(&target)..self.index.len() {
            let bytes = self.data_block_bytes(ordinal, Fetch { fill_cache: true, cache_only })?;
            let corrupt =
                |reason: String| Error::corruption(self.path.to_path_buf(), self.index.handle(ordinal).offset, reason);
            let (vs, ve) = match block::seek_in(&bytes, &target, Some(key_hash), &mut found).map_err(corrupt)? {
                block::Seek::Found(vs, ve) => (vs, ve),
                // The first entry >= target starts the next block.
                block::Seek::Past => continue,
                // No entry of this block has the user key, and the index sent the lookup here:
                // every entry before the block is < target, and the block's separator, >= target,
                // is < the next block's first user key, so no later block has the key either.
                block::Seek::Absent => return Ok(None),
            };
            let p = key::parse(&found)
                .ok_or_else(|| Error::corruption(self.path.to_path_buf(), 0, "malformed internal key"))?;
            if p.user_key != user_key {
                return Ok(None);
            }
            return Ok(Some(match p.kind {
                ValueKind::Put => Lookup::Found(bytes.slice(vs..ve), p.seq),
                ValueKind::Delete | ValueKind::RangeDelete => Lookup::Deleted(p.seq),
            }));
        }
        Ok(None)
    }

    /// A cursor over the whole table.
    pub fn iter(self: &Arc<Self>) -> TableIter {
        self.iter_with(true)
    }

    /// A cursor that caches the compressed blocks it reads only if `fill_cache`.
    pub fn iter_with(self: &Arc<Self>, fill_cache: bool) -> TableIter {
        self.iter_fetch(Fetch { fill_cache, cache_only: false })
    }

    /// A cursor reading its blocks the way `fetch` says.
    pub fn iter_fetch(self: &Arc<Self>, fetch: Fetch) -> TableIter {
        TableIter { pos: self.index.len(), data: None, table: Arc::clone(self), fetch }
    }
}

/// How a point lookup reads a table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PointFetch {
    /// From memory only (see [`ReadOptions::cache_only`](crate::ReadOptions::cache_only)).
    pub cache_only: bool,
    /// Keep the row found in the row cache (see
    /// [`ReadOptions::fill_row_cache`](crate::ReadOptions::fill_row_cache)).
    pub fill_row_cache: bool,
}

impl Default for PointFetch {
    fn default() -> Self {
        PointFetch { cache_only: false, fill_row_cache: true }
    }
}

impl PointFetch {
    /// What `opts` asks for.
    pub fn from_options(opts: &crate::ReadOptions) -> PointFetch {
        PointFetch { cache_only: opts.cache_only, fill_row_cache: opts.fill_row_cache }
    }
}

/// How a read takes the data blocks it needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fetch {
    /// Keep blocks read from disk in the block cache.
    pub fill_cache: bool,
    /// Take blocks from the block cache only; anything else fails with [`Error::WouldBlock`]
    /// (see [`ReadOptions::cache_only`](crate::ReadOptions::cache_only)).
    pub cache_only: bool,
}

impl Fetch {
    /// What `opts` asks for.
    pub fn from_options(opts: &crate::ReadOptions) -> Fetch {
        Fetch { fill_cache: opts.fill_cache, cache_only: opts.cache_only }
    }
}

/// Two-level cursor: the index picks a data block, the data block's cursor walks it.
#[derive(Debug)]
pub struct TableIter {
    table: Arc<Table>,
    /// The current data block's ordinal (`index.len()` when off either end).
    pos: usize,
    data: Option<BlockIter>,
    fetch: Fetch,
}

impl TableIter {
    /// The current value as a zero-copy slice.
    pub fn value_bytes(&self) -> Bytes {
        self.data.as_ref().map(BlockIter::value_bytes).unwrap_or_default()
    }

    fn index_valid(&self) -> bool {
        self.pos < self.table.index.len()
    }

    fn invalidate_index(&mut self) {
        self.pos = self.table.index.len();
    }

    fn load_data_block(&mut self) -> Result<()> {
        self.data = None;
        if self.index_valid() {
            let block = self.table.read_data_block(self.pos, self.fetch)?;
            self.data = Some(block.iter());
        }
        Ok(())
    }

    fn data_valid(&self) -> bool {
        self.data.as_ref().is_some_and(|d| d.valid())
    }

    fn skip_empty_blocks_forward(&mut self) -> Result<()> {
        while !self.data_valid() {
            if !self.index_valid() {
                self.data = None;
                return Ok(());
            }
            self.pos += 1;
            self.load_data_block()?;
            if let Some(d) = self.data.as_mut() {
                d.seek_to_first()?;
            }
        }
        Ok(())
    }

    fn skip_empty_blocks_backward(&mut self) -> Result<()> {
        while !self.data_valid() {
            if !self.index_valid() {
                self.data = None;
                return Ok(());
            }
            if self.pos == 0 {
                self.invalidate_index();
            } else {
                self.pos -= 1;
            }
            self.load_data_block()?;
            if let Some(d) = self.data.as_mut() {
                d.seek_to_last()?;
            }
        }
        Ok(())
    }

    fn guard(&mut self, r: Result<()>) -> Result<()> {
        if r.is_err() {
            self.data = None;
        }
        r
    }
}

impl InternalIterator for TableIter {
    fn valid(&self) -> bool {
        self.data_valid()
    }
    fn key(&self) -> &[u8] {
        self.data.as_ref().map_or(&[], |d| d.key())
    }
    fn value(&self) -> &[u8] {
        self.data.as_ref().map_or(&[], |d| d.value())
    }
    fn value_bytes(&self) -> Bytes {
        TableIter::value_bytes(self)
    }
    fn seek_to_first(&mut self) -> Result<()> {
        let r = (|| {
            self.pos = 0;
            self.load_data_block()?;
            if let Some(d) = self.data.as_mut() {
                d.seek_to_first()?;
            }
            self.skip_empty_blocks_forward()
        })();
        self.guard(r)
    }
    fn seek_to_last(&mut self) -> Result<()> {
        let r = (|| {
            self.pos = self.table.index.len().saturating_sub(1);
            self.load_data_block()?;
            if let Some(d) = self.data.as_mut() {
                d.seek_to_last()?;
            }
            self.skip_empty_blocks_backward()
        })();
        self.guard(r)
    }
    fn seek(&mut self, target: &[u8]) -> Result<()> {
        let r = (|| {
            // A target in the block already loaded (a cursor seeking a little ahead: the next
            // score range of a GEOSEARCH, past a key's old versions) seeks in it.
            if self.data.is_none() || !self.table.index.finds_at(self.pos, target) {
                self.pos = self.table.index.find(target);
                self.load_data_block()?;
            }
            if let Some(d) = self.data.as_mut() {
                d.seek(target)?;
            }
            self.skip_empty_blocks_forward()
        })();
        self.guard(r)
    }
    fn seek_for_prev(&mut self, target: &[u8]) -> Result<()> {
        let r = (|| {
            // The first block whose separator is >= target holds the last key <= target, or the
            // key is in the block before it.
            self.pos = self.table.index.find(target);
            if !self.index_valid() {
                self.pos = self.table.index.len().saturating_sub(1);
            }
            self.load_data_block()?;
            if let Some(d) = self.data.as_mut() {
                d.seek_for_prev(target)?;
            }
            self.skip_empty_blocks_backward()
        })();
        self.guard(r)
    }
    fn next(&mut self) -> Result<()> {
        let r = (|| {
            if let Some(d) = self.data.as_mut() {
                d.next()?;
            }
            self.skip_empty_blocks_forward()
        })();
        self.guard(r)
    }
    fn prev(&mut self) -> Result<()> {
        let r = (|| {
            if let Some(d) = self.data.as_mut() {
                d.prev()?;
            }
            self.skip_empty_blocks_backward()
        })();
        self.guard(r)
    }
}
