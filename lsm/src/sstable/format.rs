//! Block handles, block trailers (compression + checksum), the footer and table properties.
//!
//! ```text
//! handle  = varint offset | varint size            (size excludes the 5-byte trailer)
//! trailer = compression u8 | checksum u32 LE       (xxh3-64 low 32 bits of contents, seeded by compression)
//! footer  = metaindex offset u64 | metaindex size u64 | index offset u64 | index size u64
//!         | format_version u32 | footer checksum u32 | magic u64          (48 bytes, all LE)
//! ```

use std::path::Path;

use bytes::Bytes;

use crate::coding::{checksum, put_varint, read_u32, read_u64, Reader};
use crate::options::Compression;
use crate::{Error, Result};

/// Bytes after every block.
pub const BLOCK_TRAILER_LEN: usize = 5;
/// Bytes in the footer.
pub const FOOTER_LEN: usize = 48;
/// Magic number at the end of every table ("shaleSST").
pub const TABLE_MAGIC: u64 = u64::from_le_bytes(*b"shaleSST");
/// The only format version written so far.
pub const FORMAT_VERSION: u32 = 1;

/// Location of a block in a table file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BlockHandle {
    /// Offset of the block's first byte.
    pub offset: u64,
    /// Size of the block's contents, without the trailer.
    pub size: u64,
}

impl BlockHandle {
    /// Appends the varint encoding.
    pub fn encode_to(&self, dst: &mut Vec<u8>) {
        put_varint(dst, self.offset);
        put_varint(dst, self.size);
    }
    /// Decodes a handle from the front of `src`.
    pub fn decode(src: &[u8]) -> Option<BlockHandle> {
        let mut r = Reader::new(src);
        Some(BlockHandle { offset: r.varint()?, size: r.varint()? })
    }
}

/// The fixed-size record at the end of a table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Footer {
    /// Handle of the meta-index block.
    pub metaindex: BlockHandle,
    /// Handle of the index block.
    pub index: BlockHandle,
}

impl Footer {
    /// The 48 footer bytes.
    pub fn encode(&self) -> [u8; FOOTER_LEN] {
        let mut b = Vec::with_capacity(FOOTER_LEN);
        for v in [self.metaindex.offset, self.metaindex.size, self.index.offset, self.index.size] {
            b.extend_from_slice(&v.to_le_bytes());
        }
        b.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
        let c = checksum(0, &b);
        b.extend_from_slice(&c.to_le_bytes());
        b.extend_from_slice(&TABLE_MAGIC.to_le_bytes());
        let mut out = [0u8; FOOTER_LEN];
        out.copy_from_slice(&b);
        out
    }

    /// Reads and checks the footer at the end of `file_data`.
    pub fn decode(file_data: &[u8], file: &Path) -> Result<Footer> {
        let n = file_data.len();
        let at = n
            .checked_sub(FOOTER_LEN)
            .ok_or_else(|| Error::corruption(file, 0, format!("file of {n} bytes is too short to be a table")))?;
        Footer::decode_tail(&file_data[at..], at as u64, file)
    }

    /// Checks the footer's [`FOOTER_LEN`] bytes `f`, found at file offset `at`.
    pub fn decode_tail(f: &[u8], at: u64, file: &Path) -> Result<Footer> {
        let bad = |reason: &str| Error::corruption(file, at, reason.to_string());
        if f.len() != FOOTER_LEN {
            return Err(bad("short footer"));
        }
        if read_u64(f, 40) != Some(TABLE_MAGIC) {
            return Err(bad("bad table magic number"));
        }
        if read_u32(f, 36) != Some(checksum(0, &f[..36])) {
            return Err(bad("footer checksum mismatch"));
        }
        let version = read_u32(f, 32).unwrap_or(0);
        if version != FORMAT_VERSION {
            return Err(bad(&format!("unsupported table format version {version}")));
        }
        let h = |i: usize| BlockHandle {
            offset: read_u64(f, i * 16).unwrap_or(0),
            size: read_u64(f, i * 16 + 8).unwrap_or(0),
        };
        Ok(Footer { metaindex: h(0), index: h(1) })
    }
}

/// Compresses `raw` with `codec`; returns the codec actually used and the bytes to store
/// (`raw` itself when compression saves less than 12.5 %). `scratch` is a buffer the caller
/// keeps from block to block: it only ever grows, so compressing a block neither allocates
/// nor zeroes the output space again.
pub fn compress_block<'a>(
    raw: &'a [u8],
    codec: Compression,
    zstd_level: i32,
    scratch: &'a mut Vec<u8>,
) -> Result<(Compression, &'a [u8])> {
    let n = match codec {
        Compression::None => None,
        #[cfg(feature = "snappy")]
        Compression::Snappy => {
            let need = snap::raw::max_compress_len(raw.len());
            if scratch.len() < need {
                scratch.resize(need, 0);
            }
            let n = snap::raw::Encoder::new()
                .compress(raw, scratch)
                .map_err(|e| Error::InvalidArgument(format!("snappy: {e}")))?;
            Some(n)
        }
        #[cfg(feature = "zstd")]
        Compression::Zstd => {
            *scratch = zstd_codec::compress(raw, zstd_level)?;
            Some(scratch.len())
        }
        #[allow(unreachable_patterns)]
        other => return Err(unavailable(other)),
    };
    let _ = zstd_level;
    match n {
        Some(n) if n < raw.len() - raw.len() / 8 => Ok((codec, &scratch[..n])),
        _ => Ok((Compression::None, raw)),
    }
}

fn unavailable(c: Compression) -> Error {
    Error::CodecUnavailable(c.name(), if c == Compression::Snappy { "snappy" } else { "zstd" })
}

/// Verifies a block's trailer and returns its uncompressed contents. `file_data` is the whole
/// table; an uncompressed block is returned as a zero-copy slice of it.
pub fn read_block(file_data: &Bytes, handle: BlockHandle, file: &Path) -> Result<Bytes> {
    read_block_checked(file_data, handle, file, true)
}

/// [`read_block`], skipping the checksum when `verify` is false (a raw block already verified
/// since the table was opened).
pub fn read_block_checked(file_data: &Bytes, handle: BlockHandle, file: &Path, verify: bool) -> Result<Bytes> {
    let corrupt = |reason: String| Error::corruption(file, handle.offset, reason);
    let start = usize::try_from(handle.offset).map_err(|_| corrupt("block offset overflows".into()))?;
    let size = usize::try_from(handle.size).map_err(|_| corrupt("block size overflows".into()))?;
    let end = start
        .checked_add(size)
        .and_then(|e| e.checked_add(BLOCK_TRAILER_LEN))
        .filter(|&e| e <= file_data.len())
        .ok_or_else(|| corrupt(format!("block of {size} bytes runs past the end of the file")))?;
    decode_block(file_data.slice(start..end), handle, file, verify)
}

/// Checks and decodes a block read whole with its trailer: `raw` is the contents, the codec
/// byte and the checksum (`handle.size + BLOCK_TRAILER_LEN` bytes read at `handle.offset`). An
/// uncompressed block is returned as a zero-copy slice of `raw`.
pub fn decode_block(raw: Bytes, handle: BlockHandle, file: &Path, verify: bool) -> Result<Bytes> {
    let corrupt = |reason: String| Error::corruption(file, handle.offset, reason);
    let size = raw
        .len()
        .checked_sub(BLOCK_TRAILER_LEN)
        .filter(|&s| s as u64 == handle.size)
        .ok_or_else(|| corrupt(format!("block of {} bytes runs past the end of the file", handle.size)))?;
    let contents = &raw[..size];
    let codec_byte = raw[size];
    let stored = read_u32(&raw, size + 1).unwrap_or(0);
    if verify && checksum(codec_byte, contents) != stored {
        return Err(corrupt("block checksum mismatch".into()));
    }
    let codec =
        Compression::from_u8(codec_byte).ok_or_else(|| corrupt(format!("unknown compression type {codec_byte}")))?;
    match codec {
        Compression::None => Ok(raw.slice(..size)),
        #[cfg(feature = "snappy")]
        Compression::Snappy => {
            let mut dec = snap::raw::Decoder::new();
            dec.decompress_vec(contents).map(Bytes::from).map_err(|e| corrupt(format!("snappy: {e}")))
        }
        #[cfg(feature = "zstd")]
        Compression::Zstd => zstd_codec::decompress(contents).map(Bytes::from).map_err(corrupt),
        #[allow(unreachable_patterns)]
        other => Err(unavailable(other)),
    }
}

/// zstd with one compression and one decompression context per thread: creating a context per
/// block made zstd reads slower than RocksDB's (which reuses them).
#[cfg(feature = "zstd")]
mod zstd_codec {
    use std::cell::RefCell;

    /// Largest block a frame header may claim (a damaged header must not allocate gigabytes).
    const MAX_BLOCK: u64 = 256 << 20;

    thread_local! {
        static COMPRESSOR: RefCell<Option<(i32, zstd::bulk::Compressor<'static>)>> = const { RefCell::new(None) };
        static DECOMPRESSOR: RefCell<Option<zstd::bulk::Decompressor<'static>>> = const { RefCell::new(None) };
    }

    pub fn compress(raw: &[u8], level: i32) -> std::io::Result<Vec<u8>> {
        COMPRESSOR.with(|c| {
            let mut c = c.borrow_mut();
            if c.as_ref().is_none_or(|(l, _)| *l != level) {
                *c = Some((level, zstd::bulk::Compressor::new(level)?));
            }
            match c.as_mut() {
                Some((_, comp)) => comp.compress(raw),
                None => zstd::bulk::compress(raw, level),
            }
        })
    }

    pub fn decompress(contents: &[u8]) -> Result<Vec<u8>, String> {
        let size = match zstd::zstd_safe::get_frame_content_size(contents) {
            Ok(Some(n)) if n <= MAX_BLOCK => n as usize,
            Ok(Some(n)) => return Err(format!("zstd frame claims {n} bytes")),
            Ok(None) => return Err("zstd frame without a content size".into()),
            Err(_) => return Err("bad zstd frame header".into()),
        };
        DECOMPRESSOR.with(|d| {
            let mut d = d.borrow_mut();
            if d.is_none() {
                *d = Some(zstd::bulk::Decompressor::new().map_err(|e| format!("zstd: {e}"))?);
            }
            let d = d.as_mut().ok_or_else(|| "zstd context unavailable".to_string())?;
            let out = d.decompress(contents, size).map_err(|e| format!("zstd: {e}"))?;
            if out.len() != size {
                return Err(format!("zstd block is {} bytes, header says {size}", out.len()));
            }
            Ok(out)
        })
    }
}

/// Appends the trailer for a block stored with `codec`.
pub fn block_trailer(codec: Compression, contents: &[u8]) -> [u8; BLOCK_TRAILER_LEN] {
    let mut t = [0u8; BLOCK_TRAILER_LEN];
    t[0] = codec as u8;
    t[1..].copy_from_slice(&checksum(codec as u8, contents).to_le_bytes());
    t
}

/// Facts about a table, stored in its properties block.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TableProperties {
    /// Entries (all kinds).
    pub num_entries: u64,
    /// Tombstones.
    pub num_deletions: u64,
    /// Data blocks.
    pub num_data_blocks: u64,
    /// Bytes of internal keys before compression.
    pub raw_key_size: u64,
    /// Bytes of values before compression.
    pub raw_value_size: u64,
    /// Bytes of data blocks as stored.
    pub data_size: u64,
    /// Smallest internal key.
    pub smallest_key: Vec<u8>,
    /// Largest internal key.
    pub largest_key: Vec<u8>,
    /// Smallest sequence number.
    pub smallest_seq: u64,
    /// Largest sequence number.
    pub largest_seq: u64,
    /// Codec configured for data blocks (blocks that did not compress are stored raw).
    pub compression: u8,
    /// Range tombstones (in the range-del block, not in data blocks).
    pub num_range_deletions: u64,
    /// Some window of [`DELETION_WINDOW`] consecutive entries held at least
    /// [`DELETION_TRIGGER`] tombstones: compacting the table soon saves readers that work.
    pub dense_deletions: bool,
}

/// Entries in the sliding window a table builder watches for runs of tombstones.
pub const DELETION_WINDOW: u32 = 128;
/// Tombstones within one window that mark a table for compaction (RocksDB's
/// `CompactOnDeletionCollector`, with its window and a half-full trigger).
pub const DELETION_TRIGGER: u32 = 64;

impl TableProperties {
    /// Encodes as tagged fields.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::new();
        let nums = [
            self.num_entries,
            self.num_deletions,
            self.num_data_blocks,
            self.raw_key_size,
            self.raw_value_size,
            self.data_size,
            self.smallest_seq,
            self.largest_seq,
            u64::from(self.compression),
            self.num_range_deletions,
            u64::from(self.dense_deletions),
        ];
        for (tag, v) in nums.iter().enumerate() {
            put_varint(&mut b, tag as u64 + 1);
            put_varint(&mut b, *v);
        }
        for (tag, k) in [(20u64, &self.smallest_key), (21, &self.largest_key)] {
            put_varint(&mut b, tag);
            crate::coding::put_length_prefixed(&mut b, k);
        }
        b
    }

    /// Decodes; unknown tags are an error (the format version would have changed).
    pub fn decode(src: &[u8]) -> Option<TableProperties> {
        let mut p = TableProperties::default();
        let mut r = Reader::new(src);
        while !r.is_empty() {
            match r.varint()? {
                20 => p.smallest_key = r.length_prefixed()?.to_vec(),
                21 => p.largest_key = r.length_prefixed()?.to_vec(),
                tag @ 1..=11 => {
                    let v = r.varint()?;
                    match tag {
                        1 => p.num_entries = v,
                        2 => p.num_deletions = v,
                        3 => p.num_data_blocks = v,
                        4 => p.raw_key_size = v,
                        5 => p.raw_value_size = v,
                        6 => p.data_size = v,
                        7 => p.smallest_seq = v,
                        8 => p.largest_seq = v,
                        9 => p.compression = u8::try_from(v).ok()?,
                        10 => p.num_range_deletions = v,
                        _ => p.dense_deletions = v != 0,
                    }
                }
                _ => return None,
            }
        }
        Some(p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn footer_round_trip_and_damage() {
        let f =
            Footer { metaindex: BlockHandle { offset: 100, size: 20 }, index: BlockHandle { offset: 125, size: 300 } };
        let mut file = vec![7u8; 10];
        file.extend_from_slice(&f.encode());
        assert_eq!(Footer::decode(&file, Path::new("t")).unwrap(), f);
        for i in 10..file.len() {
            let mut bad = file.clone();
            bad[i] ^= 1;
            let e = Footer::decode(&bad, Path::new("t")).unwrap_err();
            assert!(e.is_corruption(), "byte {i}: {e}");
        }
        assert!(Footer::decode(&file[..40], Path::new("t")).unwrap_err().is_corruption());
    }

    #[test]
    fn blocks_round_trip_with_every_codec() {
        let raw: Vec<u8> = (0..8000).map(|i| (i % 13) as u8).collect();
        let mut codecs = vec![Compression::None];
        if cfg!(feature = "snappy") {
            codecs.push(Compression::Snappy);
        }
        if cfg!(feature = "zstd") {
            codecs.push(Compression::Zstd);
        }
        for codec in codecs {
            let mut scratch = Vec::new();
            let (used, stored) = compress_block(&raw, codec, 3, &mut scratch).unwrap();
            assert_eq!(used, codec, "repetitive data compresses");
            let mut file = vec![0u8; 3];
            file.extend_from_slice(stored);
            file.extend_from_slice(&block_trailer(used, stored));
            let file = Bytes::from(file);
            let h = BlockHandle { offset: 3, size: stored.len() as u64 };
            assert_eq!(&read_block(&file, h, Path::new("t")).unwrap()[..], &raw[..]);
            let mut bad = file.to_vec();
            bad[10] ^= 0x40;
            assert!(read_block(&Bytes::from(bad), h, Path::new("t")).unwrap_err().is_corruption());
            let past_end = BlockHandle { offset: 3, size: stored.len() as u64 + 1 };
            assert!(read_block(&file, past_end, Path::new("t")).unwrap_err().is_corruption());
        }
    }

    #[test]
    #[cfg(feature = "snappy")]
    fn a_reused_scratch_buffer_gives_each_block_its_own_bytes() {
        let mut scratch = Vec::new();
        let big: Vec<u8> = (0..8000).map(|i| (i % 7) as u8).collect();
        let small: Vec<u8> = (0..900).map(|i| (i % 5) as u8 + 100).collect();
        for raw in [&big, &small, &big] {
            let (used, stored) = compress_block(raw, Compression::Snappy, 3, &mut scratch).unwrap();
            assert_eq!(used, Compression::Snappy);
            assert_eq!(&snap::raw::Decoder::new().decompress_vec(stored).unwrap(), raw);
        }
    }

    #[test]
    fn incompressible_blocks_are_stored_raw() {
        let mut seed = 42u64;
        let raw: Vec<u8> = (0..4096)
            .map(|_| {
                seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                (seed >> 33) as u8
            })
            .collect();
        let mut scratch = Vec::new();
        if cfg!(feature = "snappy") {
            let (used, stored) = compress_block(&raw, Compression::Snappy, 3, &mut scratch).unwrap();
            assert_eq!((used, stored), (Compression::None, &raw[..]));
        }
    }

    #[test]
    fn properties_round_trip() {
        let p = TableProperties {
            num_entries: 5,
            num_deletions: 1,
            smallest_key: b"a".to_vec(),
            largest_key: b"z".to_vec(),
            largest_seq: 99,
            compression: 2,
            dense_deletions: true,
            ..Default::default()
        };
        assert_eq!(TableProperties::decode(&p.encode()), Some(p));
        assert_eq!(TableProperties::decode(&[99, 1]), None);
    }
}
