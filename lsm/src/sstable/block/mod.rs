//! Data and index blocks: prefix-compressed entries with restart points, and for data blocks a
//! hash index of their user keys.
//!
//! ```text
//! entry    = varint shared | varint unshared | varint vlen | key[shared..] | value
//! block    = entry* | restart_offset u32 LE * n | [bucket u8 * m | m u16 LE] | footer u32 LE
//! footer   = n | (1 << 31 if the buckets are there)
//! ```
//! Every `restart_interval` entries the key is stored whole (`shared = 0`) and its offset goes in
//! the restart array, so a seek binary-searches restarts and then scans at most one interval.
//!
//! The hash index (RocksDB's `kDataBlockBinaryAndHash`) lets a point lookup skip that binary
//! search, whose every probe reads a restart key from another cache line of the block: bucket
//! [`bucket_of`]`(xxh3-64(user key), m)` holds the restart interval where the user key's entries
//! start, [`NO_ENTRY`] if no entry of the block has that user key, or [`COLLISION`] if two
//! intervals hash there (or one key's entries span intervals); then the lookup falls back to
//! the binary search. `m` is about 4/3 of the block's distinct user keys, odd. Blocks with more
//! than [`MAX_HASHED_RESTARTS`] restart points carry no buckets.

use std::cmp::Ordering;
use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;

use crate::coding::{get_varint32, put_varint, read_u32};
use crate::iter::InternalIterator;
use crate::key;
use crate::{Error, Result};

/// A bucket no user key of the block hashes to.
pub const NO_ENTRY: u8 = 255;
/// A bucket that user keys of different restart intervals hash to.
pub const COLLISION: u8 = 254;
/// The most restart points a block with a hash index has (a bucket holds a restart's number
/// below [`COLLISION`]).
pub const MAX_HASHED_RESTARTS: usize = 253;
/// The footer bit saying a block has a hash index.
const HASHED: u32 = 1 << 31;

/// The bucket of `m` that a user key with [`bloom::hash_key`](super::bloom::hash_key) `hash`
/// falls in: the high 32 bits scaled onto `0..m` (the filter's line takes the low 32).
#[inline]
pub fn bucket_of(hash: u64, m: usize) -> usize {
    (((hash >> 32) * m as u64) >> 32) as usize
}

/// Builds one block.
#[derive(Debug)]
pub struct BlockBuilder {
    buf: Vec<u8>,
    restarts: Vec<u32>,
    restart_interval: usize,
    counter: usize,
    last_key: Vec<u8>,
    entries: usize,
    /// With a hash index: each distinct (user key hash, restart point) added, in order.
    hashed: Option<Vec<(u64, u32)>>,
}

impl BlockBuilder {
    /// A builder putting a restart point every `restart_interval` entries.
    pub fn new(restart_interval: usize) -> Self {
        BlockBuilder {
            buf: Vec::new(),
            restarts: vec![0],
            restart_interval: restart_interval.max(1),
            counter: 0,
            last_key: Vec::new(),
            entries: 0,
            hashed: None,
        }
    }

    /// A builder of data blocks with a hash index of their user keys; entries are added with
    /// [`BlockBuilder::add_hashed`].
    pub fn with_hash_index(restart_interval: usize) -> Self {
        BlockBuilder { hashed: Some(Vec::new()), ..Self::new(restart_interval) }
    }

    /// [`BlockBuilder::add`] of an internal key whose user key has
    /// [`bloom::hash_key`](super::bloom::hash_key) `hash`, recorded in the hash index if the
    /// builder makes one.
    pub fn add_hashed(&mut self, key: &[u8], value: &[u8], hash: u64) {
        self.add(key, value);
        let restart = (self.restarts.len() - 1) as u32;
        if let Some(h) = &mut self.hashed {
            if h.last() != Some(&(hash, restart)) {
                h.push((hash, restart));
            }
        }
    }

    /// Buckets the hash index of the entries added so far would have (0 without one).
    fn buckets(&self) -> usize {
        match &self.hashed {
            Some(h) if !h.is_empty() && self.restarts.len() <= MAX_HASHED_RESTARTS => (h.len() * 4 / 3) | 1,
            _ => 0,
        }
    }

    /// Appends an entry; keys must arrive in increasing internal-key order.
    pub fn add(&mut self, key: &[u8], value: &[u8]) {
        let shared = if self.counter < self.restart_interval {
            self.last_key.iter().zip(key).take_while(|(a, b)| a == b).count()
        } else {
            self.restarts.push(self.buf.len() as u32);
            self.counter = 0;
            0
        };
        put_varint(&mut self.buf, shared as u64);
        put_varint(&mut self.buf, (key.len() - shared) as u64);
        put_varint(&mut self.buf, value.len() as u64);
        self.buf.extend_from_slice(&key[shared..]);
        self.buf.extend_from_slice(value);
        self.last_key.clear();
        self.last_key.extend_from_slice(key);
        self.counter += 1;
        self.entries += 1;
    }

    /// Size the finished block would have.
    pub fn estimated_size(&self) -> usize {
        let buckets = self.buckets();
        self.buf.len() + 4 * self.restarts.len() + 4 + if buckets > 0 { buckets + 2 } else { 0 }
    }

    /// True when nothing was added since the last `finish`.
    pub fn is_empty(&self) -> bool {
        self.entries == 0
    }

    /// The last key added.
    pub fn last_key(&self) -> &[u8] {
        &self.last_key
    }

    /// Appends the restart array (and the hash index) and returns the block's bytes; the
    /// builder is reset.
    pub fn finish(&mut self) -> Vec<u8> {
        let mut out = std::mem::take(&mut self.buf);
        for r in &self.restarts {
            out.extend_from_slice(&r.to_le_bytes());
        }
        let mut footer = self.restarts.len() as u32;
        let m = self.buckets();
        if let Some(hashed) = self.hashed.as_mut() {
            if m > 0 && m <= u16::MAX as usize {
                let start = out.len();
                out.resize(start + m, NO_ENTRY);
                let buckets = &mut out[start..];
                for &(hash, restart) in hashed.iter() {
                    let b = &mut buckets[bucket_of(hash, m)];
                    *b = match *b {
                        NO_ENTRY => restart as u8,
                        same if same == restart as u8 => same,
                        _ => COLLISION,
                    };
                }
                out.extend_from_slice(&(m as u16).to_le_bytes());
                footer |= HASHED;
            }
            hashed.clear();
        }
        out.extend_from_slice(&footer.to_le_bytes());
        self.restarts.clear();
        self.restarts.push(0);
        self.counter = 0;
        self.entries = 0;
        self.last_key.clear();
        out
    }

    /// Hands back the buffer a [`BlockBuilder::finish`] returned, once its bytes are written:
    /// the next block is built in it, without growing a new buffer from nothing (about ten
    /// reallocations for a 4 KiB block).
    pub fn recycle(&mut self, mut buf: Vec<u8>) {
        if self.buf.is_empty() && self.buf.capacity() < buf.capacity() {
            buf.clear();
            self.buf = buf;
        }
    }
}

/// Where a block came from, for error messages.
#[derive(Debug, Clone)]
pub struct BlockOrigin {
    /// The table file.
    pub file: Arc<Path>,
    /// The block's offset in the file.
    pub offset: u64,
}

impl BlockOrigin {
    fn corrupt(&self, reason: impl Into<String>) -> Error {
        Error::corruption(self.file.to_path_buf(), self.offset, reason)
    }
}

/// A decoded (uncompressed, checksum-verified) block.
#[derive(Debug, Clone)]
pub struct Block {
    data: Bytes,
    restarts_at: usize,
    num_restarts: usize,
    origin: BlockOrigin,
}

impl Block {
    /// Validates the restart array (and hash index) of `data`.
    pub fn new(data: Bytes, origin: BlockOrigin) -> Result<Block> {
        let Layout { restarts_at, num_restarts, .. } = layout(&data).map_err(|reason| origin.corrupt(reason))?;
        Ok(Block { data, restarts_at, num_restarts, origin })
    }

    /// Bytes of the block's contents.
    pub fn size(&self) -> usize {
        self.data.len()
    }

    /// A cursor over the block.
    pub fn iter(&self) -> BlockIter {
        BlockIter {
            block: self.clone(),
            current: self.restarts_at,
            next: self.restarts_at,
            restart_index: 0,
            key: Vec::new(),
            value: (0, 0),
        }
    }

    fn restart(&self, i: usize) -> usize {
        restart_offset(&self.data, self.restarts_at, i)
    }
}

/// Where a block's parts lie.
#[derive(Debug, Clone, Copy)]
struct Layout {
    /// Where the entries end and the restart array starts.
    restarts_at: usize,
    num_restarts: usize,
    /// Where the hash index's buckets start and how many there are, if the block has one.
    buckets: Option<(usize, usize)>,
}

/// Where the parts of the block `data` lie; the reason if its footer, restart array or hash
/// index do not fit it.
fn layout(data: &[u8]) -> std::result::Result<Layout, String> {
    let n = data.len();
    let footer = read_u32(data, n.wrapping_sub(4)).filter(|_| n >= 4).ok_or_else(|| "block too short".to_string())?;
    let num_restarts = (footer & !HASHED) as usize;
    let (end, buckets) = if footer & HASHED == 0 {
        (n - 4, None)
    } else {
        let m = data.get(n.wrapping_sub(6)..n - 4).filter(|_| n >= 6).map(|b| u16::from_le_bytes([b[0], b[1]]));
        let at = m.and_then(|m| (n - 6).checked_sub(m as usize)).filter(|_| m.is_some_and(|m| m > 0));
        let at = at.ok_or_else(|| format!("bad hash index size {}", m.unwrap_or(0)))?;
        if num_restarts > MAX_HASHED_RESTARTS {
            return Err(format!("hash index with {num_restarts} restarts"));
        }
        (at, Some((at, (n - 6 - at))))
    };
    let restarts_at = num_restarts
        .checked_mul(4)
        .and_then(|r| end.checked_sub(r))
        .filter(|_| num_restarts > 0)
        .ok_or_else(|| format!("bad restart count {num_restarts}"))?;
    Ok(Layout { restarts_at, num_restarts, buckets })
}

/// The offset restart point `i` names (0 if it lies outside: the entry decoded there is then
/// checked like any other).
fn restart_offset(data: &[u8], restarts_at: usize, i: usize) -> usize {
    read_u32(data, restarts_at + 4 * i).unwrap_or(0) as usize
}

/// The entry at `at` of `entries` (a block's bytes up to its restart array): its shared prefix
/// length, where its key's unshared bytes start, and its value's range; `None` if it does not
/// decode or runs past the entries.
#[inline]
fn decode_entry(entries: &[u8], at: usize) -> Option<(usize, usize, (usize, usize))> {
    let mut p = at;
    let (shared, n) = get_varint32(entries.get(p..)?)?;
    p += n;
    let (unshared, n) = get_varint32(entries.get(p..)?)?;
    p += n;
    let (vlen, n) = get_varint32(entries.get(p..)?)?;
    p += n;
    let vstart = p.checked_add(unshared as usize)?;
    let vend = vstart.checked_add(vlen as usize).filter(|&e| e <= entries.len())?;
    Some((shared as usize, p, (vstart, vend)))
}

/// Decodes the entry at `at` of `entries` onto `key` (the previous entry's key, or empty at a
/// restart point), returning its value's range; `None` if it is malformed.
#[inline]
fn next_entry(entries: &[u8], at: usize, key: &mut Vec<u8>) -> Option<(usize, usize)> {
    let (shared, start, value) = decode_entry(entries, at).filter(|e| e.0 <= key.len())?;
    key.truncate(shared);
    key.extend_from_slice(&entries[start..value.0]);
    Some(value)
}

/// The whole key stored at restart point `i` (restart entries share no prefix).
#[inline]
fn restart_key(data: &[u8], restarts_at: usize, i: usize) -> std::result::Result<&[u8], String> {
    let entries = &data[..restarts_at];
    let at = restart_offset(data, restarts_at, i);
    match decode_entry(entries, at) {
        Some((0, start, (vstart, _))) => Ok(&entries[start..vstart]),
        _ => Err(format!("bad restart entry at block offset {at}")),
    }
}

/// The last restart point whose key is `<` target (0 if none is).
fn restart_before(
    data: &[u8],
    restarts_at: usize,
    num_restarts: usize,
    target: &[u8],
) -> std::result::Result<usize, String> {
    let (mut lo, mut hi) = (0usize, num_restarts - 1);
    while lo < hi {
        let mid = (lo + hi).div_ceil(2);
        if key::compare(restart_key(data, restarts_at, mid)?, target) == Ordering::Less {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    Ok(lo)
}

/// What a point lookup found in one block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Seek {
    /// An entry `>= target`: its value's range (its key is left in the caller's buffer). It is
    /// the first such entry, or, when the target's user key is not in the block but shares a
    /// bucket with one that is, an entry of another user key.
    Found(usize, usize),
    /// Every entry is smaller than the target.
    Past,
    /// The hash index says no entry has the target's user key.
    Absent,
}

/// A point lookup in the block `data` without a cursor (no reference counts taken, no block
/// copied): the first entry whose internal key is `>= target`, its key left in `key` (a point
/// lookup reads only whether its user key is the target's; see [`Seek::Found`]). With
/// `hash`, the [`bloom::hash_key`](super::bloom::hash_key) of the target's user key, a block
/// with a hash index answers from its bucket where that key's entries start, or
/// [`Seek::Absent`] when it has none (a block without one, or a collision, binary-searches the
/// restarts). `Err` names what is malformed.
pub(super) fn seek_in(
    data: &[u8],
    target: &[u8],
    hash: Option<u64>,
    key: &mut Vec<u8>,
) -> std::result::Result<Seek, String> {
    let Layout { restarts_at, num_restarts, buckets } = layout(data)?;
    let restart = match (hash, buckets) {
        (Some(hash), Some((at, m))) => match data[at + bucket_of(hash, m)] {
            NO_ENTRY => return Ok(Seek::Absent),
            COLLISION => None,
            r if (r as usize) < num_restarts => Some(r as usize),
            r => return Err(format!("hash bucket names restart {r} of {num_restarts}")),
        },
        _ => None,
    };
    let restart = match restart {
        Some(r) => r,
        None => restart_before(data, restarts_at, num_restarts, target)?,
    };
    let entries = &data[..restarts_at];
    let mut at = restart_offset(data, restarts_at, restart);
    key.clear();
    while at < restarts_at {
        let value = next_entry(entries, at, key).ok_or_else(|| format!("bad block entry at block offset {at}"))?;
        if key::compare(key, target) != Ordering::Less {
            return Ok(Seek::Found(value.0, value.1));
        }
        at = value.1;
    }
    Ok(Seek::Past)
}

/// Cursor over one block. Compares keys as internal keys.
#[derive(Debug)]
pub struct BlockIter {
    block: Block,
    /// Offset of the current entry (`restarts_at` when invalid).
    current: usize,
    /// Offset of the entry after the current one.
    next: usize,
    restart_index: usize,
    key: Vec<u8>,
    value: (usize, usize),
}

impl BlockIter {
    /// The current value as a zero-copy slice of the block.
    pub fn value_bytes(&self) -> Bytes {
        self.block.data.slice(self.value.0..self.value.1)
    }

    fn invalidate(&mut self) {
        self.current = self.block.restarts_at;
        self.next = self.block.restarts_at;
        self.key.clear();
    }

    fn seek_to_restart(&mut self, i: usize) {
        self.restart_index = i;
        self.key.clear();
        self.next = self.block.restart(i);
    }

    /// Decodes the entry at `self.next`; `Ok(false)` at the end of the entries.
    fn parse_next(&mut self) -> Result<bool> {
        self.current = self.next;
        let end = self.block.restarts_at;
        if self.current >= end {
            self.invalidate();
            return Ok(false);
        }
        let at = self.current;
        let parsed = next_entry(&self.block.data[..end], at, &mut self.key);
        match parsed {
            Some((vs, ve)) => {
                self.value = (vs, ve);
                self.next = ve;
                while self.restart_index + 1 < self.block.num_restarts
                    && self.block.restart(self.restart_index + 1) <= self.current
                {
                    self.restart_index += 1;
                }
                Ok(true)
            }
            None => {
                self.invalidate();
                Err(self.block.origin.corrupt(format!("bad block entry at block offset {at}")))
            }
        }
    }
}

impl InternalIterator for BlockIter {
    fn valid(&self) -> bool {
        self.current < self.block.restarts_at
    }
    fn key(&self) -> &[u8] {
        &self.key
    }
    fn value(&self) -> &[u8] {
        &self.block.data[self.value.0..self.value.1]
    }
    fn seek_to_first(&mut self) -> Result<()> {
        self.seek_to_restart(0);
        self.parse_next().map(drop)
    }
    fn seek_to_last(&mut self) -> Result<()> {
        self.seek_to_restart(self.block.num_restarts - 1);
        while self.parse_next()? && self.next < self.block.restarts_at {}
        Ok(())
    }
    fn seek(&mut self, target: &[u8]) -> Result<()> {
        let b = &self.block;
        let lo = restart_before(&b.data, b.restarts_at, b.num_restarts, target)
            .map_err(|reason| b.origin.corrupt(reason))?;
        self.seek_to_restart(lo);
        while self.parse_next()? {
            if key::compare(&self.key, target) != Ordering::Less {
                return Ok(());
            }
        }
        Ok(())
    }
    fn seek_for_prev(&mut self, target: &[u8]) -> Result<()> {
        self.seek(target)?;
        if !self.valid() {
            return self.seek_to_last();
        }
        if key::compare(&self.key, target) == Ordering::Greater {
            self.prev()?;
        }
        Ok(())
    }
    fn next(&mut self) -> Result<()> {
        self.parse_next().map(drop)
    }
    fn prev(&mut self) -> Result<()> {
        let original = self.current;
        // Back up to a restart point strictly before the current entry, then scan forward.
        while self.block.restart(self.restart_index) >= original {
            if self.restart_index == 0 {
                self.invalidate();
                return Ok(());
            }
            self.restart_index -= 1;
        }
        self.seek_to_restart(self.restart_index);
        while self.parse_next()? && self.next < original {}
        Ok(())
    }
}

#[cfg(test)]
mod tests;
