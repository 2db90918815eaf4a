//! Writing a table.

use std::io::Write;

use super::block::BlockBuilder;
use super::bloom;
use super::format::{self, block_trailer, compress_block, BlockHandle, Footer, TableProperties};
use super::{META_FILTER, META_PROPERTIES, META_RANGE_DEL};
use crate::key::{self, ValueKind};
use crate::options::{Compression, Options};
use crate::range_del::RangeTombstone;
use crate::{Error, Result};

/// Settings a table is built with.
#[derive(Debug, Clone)]
pub struct TableOptions {
    /// Target uncompressed data block size.
    pub block_size: usize,
    /// Entries between restart points.
    pub restart_interval: usize,
    /// Codec for data blocks.
    pub compression: Compression,
    /// zstd level.
    pub zstd_level: i32,
    /// Bloom bits per key (0 = no filter).
    pub bloom_bits_per_key: u32,
    /// Data blocks carry a hash index of their user keys (see [`super::block`]).
    pub hash_index: bool,
    /// Asked before the finished table is fsynced (tests).
    pub faults: Option<std::sync::Arc<dyn crate::fault::FaultInjector>>,
}

impl TableOptions {
    /// The table settings of a database's options.
    pub fn from_options(o: &Options) -> Self {
        TableOptions {
            block_size: o.block_size,
            restart_interval: o.block_restart_interval,
            compression: o.compression,
            zstd_level: o.zstd_level,
            bloom_bits_per_key: o.bloom_bits_per_key,
            hash_index: o.data_block_hash_index,
            faults: o.faults.clone(),
        }
    }
}

impl Default for TableOptions {
    fn default() -> Self {
        Self::from_options(&Options::default())
    }
}

/// Streams sorted internal keys into a table.
#[derive(Debug)]
pub struct TableBuilder<W: Write> {
    w: W,
    offset: u64,
    opts: TableOptions,
    data: BlockBuilder,
    index: BlockBuilder,
    /// The last flushed data block, waiting for the next key to pick its index separator.
    pending_index: Option<BlockHandle>,
    last_key: Vec<u8>,
    /// [`bloom::hash_key`] of `last_key`'s user key.
    last_hash: u64,
    filter: FilterKeys,
    props: TableProperties,
    scratch: Vec<u8>,
    range_dels: Vec<RangeTombstone>,
    /// One bit per recent entry, set for tombstones (see `DELETION_WINDOW`, which is 128).
    deletion_window: u128,
    /// Where finished data blocks are cached as they are written (see
    /// [`TableBuilder::cache_blocks`]).
    block_sink: Option<BlockSink>,
}

/// The most keys [`TableBuilder::expect_keys`] sizes a filter for up front (80 MiB of filter at
/// 10 bits a key, where a table of the default 64 MiB holds about a million).
pub(crate) const MAX_EXPECTED_KEYS: usize = 1 << 26;

/// What the table's bloom filter is built from.
#[derive(Debug)]
enum FilterKeys {
    /// No filter (`bloom_bits_per_key` 0).
    None,
    /// Every key's hash, until `finish` knows how many there are.
    Hashes(bloom::Hashes),
    /// The filter itself, sized in advance (see [`TableBuilder::expect_keys`]).
    Streaming(bloom::StreamingFilter),
}

/// A block cache that a table's data blocks go into as the table is written.
#[derive(Debug)]
struct BlockSink {
    cache: std::sync::Arc<crate::cache::BlockCache>,
    /// The table's file number, the cache's key with the block's offset.
    number: u64,
    /// Uncompressed blocks too (a table read with `pread`; a mapped one reads them in place).
    uncompressed: bool,
}

impl<W: Write> TableBuilder<W> {
    /// Starts a table written to `w`.
    pub fn new(w: W, opts: TableOptions) -> Result<Self> {
        if !opts.compression.is_available() {
            let feature = if opts.compression == Compression::Snappy { "snappy" } else { "zstd" };
            return Err(Error::CodecUnavailable(opts.compression.name(), feature));
        }
        let props =
            TableProperties { compression: opts.compression as u8, smallest_seq: u64::MAX, ..Default::default() };
        let filter =
            if opts.bloom_bits_per_key > 0 { FilterKeys::Hashes(bloom::Hashes::default()) } else { FilterKeys::None };
        Ok(TableBuilder {
            w,
            offset: 0,
            data: if opts.hash_index {
                BlockBuilder::with_hash_index(opts.restart_interval)
            } else {
                BlockBuilder::new(opts.restart_interval)
            },
            index: BlockBuilder::new(1),
            opts,
            pending_index: None,
            last_key: Vec::new(),
            last_hash: 0,
            filter,
            props,
            scratch: Vec::new(),
            range_dels: Vec::new(),
            deletion_window: 0,
            block_sink: None,
        })
    }

    /// Puts each data block into `cache` under table `number` as it is written, decompressed
    /// as a read would cache it; uncompressed blocks only if `uncompressed` (see
    /// [`crate::Options::prepopulate_block_cache`]).
    pub fn cache_blocks(&mut self, cache: std::sync::Arc<crate::cache::BlockCache>, number: u64, uncompressed: bool) {
        self.block_sink = Some(BlockSink { cache, number, uncompressed });
    }

    /// Sizes the bloom filter for at most `keys` distinct user keys, so it is built as keys
    /// arrive instead of from every key's hash collected until [`TableBuilder::finish`] (8
    /// bytes a key; see [`bloom::StreamingFilter`]). Only before the first [`TableBuilder::add`].
    /// More keys than that still give a correct filter, with more false positives: a writer
    /// that cannot bound the count cuts the table when [`TableBuilder::filter_is_full`]. A count
    /// past `MAX_EXPECTED_KEYS` (a damaged estimate) is ignored: the hashes are collected.
    pub fn expect_keys(&mut self, keys: usize) {
        if self.props.num_entries == 0 && self.opts.bloom_bits_per_key > 0 && keys <= MAX_EXPECTED_KEYS {
            self.filter = FilterKeys::Streaming(bloom::StreamingFilter::new(keys, self.opts.bloom_bits_per_key));
        }
    }

    /// True once the filter sized by [`TableBuilder::expect_keys`] holds as many keys as it
    /// was sized for.
    pub fn filter_is_full(&self) -> bool {
        matches!(&self.filter, FilterKeys::Streaming(f) if f.is_full())
    }

    /// Adds a range tombstone (stored in the range-del block; any order).
    pub fn add_range_tombstone(&mut self, t: RangeTombstone) {
        if t.start < t.end {
            self.range_dels.push(t);
        }
    }

    /// Number of entries added.
    pub fn num_entries(&self) -> u64 {
        self.props.num_entries
    }

    /// Bytes written so far plus the data block being built.
    pub fn estimated_file_size(&self) -> u64 {
        self.offset + self.data.estimated_size() as u64
    }

    /// Adds an entry. Internal keys must be strictly increasing.
    pub fn add(&mut self, ikey: &[u8], value: &[u8]) -> Result<()> {
        let parsed = key::parse(ikey).ok_or_else(|| Error::InvalidArgument("malformed internal key".into()))?;
        if self.props.num_entries > 0 && key::compare(&self.last_key, ikey) != std::cmp::Ordering::Less {
            return Err(Error::InvalidArgument("table keys must be added in increasing order".into()));
        }
        // The block is cut before an entry that would take it past `block_size` once it is
        // 90 % full (RocksDB's `block_size_deviation`): blocks then stay within the allocator's
        // size class of `block_size` when they are read back into the cache.
        let entry = ikey.len() + value.len() + 3 * 5 + 4;
        if !self.data.is_empty()
            && self.data.estimated_size() + entry > self.opts.block_size
            && self.data.estimated_size() * 10 >= self.opts.block_size * 9
        {
            self.flush_data_block()?;
        }
        if let Some(handle) = self.pending_index.take() {
            let sep = key::shortest_separator(&self.last_key, ikey);
            let mut h = Vec::new();
            handle.encode_to(&mut h);
            self.index.add(&sep, &h);
        }
        if self.props.num_entries == 0 || key::user_key(&self.last_key) != parsed.user_key {
            self.last_hash = bloom::hash_key(parsed.user_key);
            match &mut self.filter {
                FilterKeys::None => {}
                FilterKeys::Hashes(h) => h.push(self.last_hash),
                FilterKeys::Streaming(f) => f.add(self.last_hash),
            }
        }
        if self.props.num_entries == 0 {
            self.props.smallest_key = ikey.to_vec();
        }
        self.props.num_entries += 1;
        let deleted = parsed.kind == ValueKind::Delete;
        if deleted {
            self.props.num_deletions += 1;
        }
        // The last DELETION_WINDOW entries, newest in bit 0, one bit per tombstone.
        self.deletion_window = (self.deletion_window << 1) | u128::from(deleted);
        if deleted && self.deletion_window.count_ones() >= format::DELETION_TRIGGER {
            self.props.dense_deletions = true;
        }
        self.props.raw_key_size += ikey.len() as u64;
        self.props.raw_value_size += value.len() as u64;
        self.props.smallest_seq = self.props.smallest_seq.min(parsed.seq);
        self.props.largest_seq = self.props.largest_seq.max(parsed.seq);
        self.last_key.clear();
        self.last_key.extend_from_slice(ikey);
        self.data.add_hashed(ikey, value, self.last_hash);
        if self.data.estimated_size() >= self.opts.block_size {
            self.flush_data_block()?;
        }
        Ok(())
    }

    /// Widens the key and sequence ranges to cover the range tombstones. A tombstone's start
    /// and (exclusive) end become `(key, MAX_SEQUENCE, RangeDelete)` sentinels, which sort
    /// before every real entry of that user key, so tables of one level stay disjoint.
    fn include_range_tombstones(&mut self) {
        self.props.num_range_deletions = self.range_dels.len() as u64;
        for t in &self.range_dels {
            let lo = key::make_internal_key(&t.start, key::MAX_SEQUENCE, ValueKind::RangeDelete);
            let hi = key::make_internal_key(&t.end, key::MAX_SEQUENCE, ValueKind::RangeDelete);
            if self.props.smallest_key.is_empty() || key::compare(&lo, &self.props.smallest_key).is_lt() {
                self.props.smallest_key = lo;
            }
            if self.props.largest_key.is_empty() || key::compare(&hi, &self.props.largest_key).is_gt() {
                self.props.largest_key = hi;
            }
            self.props.smallest_seq = self.props.smallest_seq.min(t.seq);
            self.props.largest_seq = self.props.largest_seq.max(t.seq);
        }
    }

    fn flush_data_block(&mut self) -> Result<()> {
        if self.data.is_empty() {
            return Ok(());
        }
        let raw = self.data.finish();
        let (handle, codec) = self.write_block(&raw, self.opts.compression)?;
        if let Some(sink) = self.block_sink.as_ref().filter(|s| s.uncompressed || codec != Compression::None) {
            sink.cache.insert(sink.number, handle.offset, bytes::Bytes::copy_from_slice(&raw));
        }
        self.data.recycle(raw);
        self.props.num_data_blocks += 1;
        self.props.data_size += handle.size + super::format::BLOCK_TRAILER_LEN as u64;
        self.pending_index = Some(handle);
        Ok(())
    }

    /// Writes one block and its trailer; returns where it is and the codec it was stored with.
    fn write_block(&mut self, raw: &[u8], codec: Compression) -> Result<(BlockHandle, Compression)> {
        let mut scratch = std::mem::take(&mut self.scratch);
        let (used, contents) = compress_block(raw, codec, self.opts.zstd_level, &mut scratch)?;
        let handle = BlockHandle { offset: self.offset, size: contents.len() as u64 };
        self.w.write_all(contents)?;
        self.w.write_all(&block_trailer(used, contents))?;
        self.offset += (contents.len() + super::format::BLOCK_TRAILER_LEN) as u64;
        self.scratch = scratch;
        Ok((handle, used))
    }

    /// Writes the filter, properties, meta-index, index and footer. Returns the writer, the
    /// table's properties and its size in bytes.
    pub fn finish(mut self) -> Result<(W, TableProperties, u64)> {
        self.flush_data_block()?;
        if let Some(handle) = self.pending_index.take() {
            let sep = key::short_successor(&self.last_key);
            let mut h = Vec::new();
            handle.encode_to(&mut h);
            self.index.add(&sep, &h);
        }
        self.props.largest_key = self.last_key.clone();
        self.include_range_tombstones();
        if self.props.num_entries == 0 && self.range_dels.is_empty() {
            self.props.smallest_seq = 0;
        }
        let mut meta = BlockBuilder::new(1);
        // Meta-index entries in byte order: "lsm.bloom" < "lsm.properties".
        let filter = match std::mem::replace(&mut self.filter, FilterKeys::None) {
            FilterKeys::None => None,
            FilterKeys::Hashes(h) => Some(bloom::build_from(h.iter(), self.opts.bloom_bits_per_key)),
            FilterKeys::Streaming(f) => Some(f.finish()),
        };
        if let Some(filter) = filter {
            let (h, _) = self.write_block(&filter, Compression::None)?;
            let mut enc = Vec::new();
            h.encode_to(&mut enc);
            meta.add(META_FILTER, &enc);
        }
        let props = self.props.encode();
        let (h, _) = self.write_block(&props, Compression::None)?;
        let mut enc = Vec::new();
        h.encode_to(&mut enc);
        meta.add(META_PROPERTIES, &enc);
        if !self.range_dels.is_empty() {
            let mut rd = BlockBuilder::new(1);
            let mut entries: Vec<(Vec<u8>, &[u8])> = self
                .range_dels
                .iter()
                .map(|t| (key::make_internal_key(&t.start, t.seq, ValueKind::RangeDelete), t.end.as_slice()))
                .collect();
            entries.sort_by(|a, b| key::compare(&a.0, &b.0));
            for (k, end) in entries {
                rd.add(&k, end);
            }
            let raw = rd.finish();
            let (h, _) = self.write_block(&raw, Compression::None)?;
            let mut enc = Vec::new();
            h.encode_to(&mut enc);
            meta.add(META_RANGE_DEL, &enc);
        }
        let meta_raw = meta.finish();
        let (metaindex, _) = self.write_block(&meta_raw, Compression::None)?;
        let index_raw = self.index.finish();
        let (index, _) = self.write_block(&index_raw, Compression::None)?;
        self.w.write_all(&Footer { metaindex, index }.encode())?;
        self.offset += super::format::FOOTER_LEN as u64;
        self.w.flush()?;
        Ok((self.w, self.props, self.offset))
    }
}
