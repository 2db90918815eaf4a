//! Data and index blocks: prefix-compressed entries with restart points.
//!
//! ```text
//! entry    = varint shared | varint unshared | varint vlen | key[shared..] | value
//! block    = entry* | restart_offset u32 LE * n | n u32 LE
//! ```
//! Every `restart_interval` entries the key is stored whole (`shared = 0`) and its offset goes in
//! the restart array, so a seek binary-searches restarts and then scans at most one interval.

use std::cmp::Ordering;
use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;

use crate::coding::{get_varint32, put_varint, read_u32};
use crate::iter::InternalIterator;
use crate::key;
use crate::{Error, Result};

/// Builds one block.
#[derive(Debug)]
pub struct BlockBuilder {
    buf: Vec<u8>,
    restarts: Vec<u32>,
    restart_interval: usize,
    counter: usize,
    last_key: Vec<u8>,
    entries: usize,
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
        self.buf.len() + 4 * self.restarts.len() + 4
    }

    /// True when nothing was added since the last `finish`.
    pub fn is_empty(&self) -> bool {
        self.entries == 0
    }

    /// The last key added.
    pub fn last_key(&self) -> &[u8] {
        &self.last_key
    }

    /// Appends the restart array and returns the block's bytes; the builder is reset.
    pub fn finish(&mut self) -> Vec<u8> {
        let mut out = std::mem::take(&mut self.buf);
        for r in &self.restarts {
            out.extend_from_slice(&r.to_le_bytes());
        }
        out.extend_from_slice(&(self.restarts.len() as u32).to_le_bytes());
        self.restarts = vec![0];
        self.counter = 0;
        self.entries = 0;
        self.last_key.clear();
        out
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
    /// Validates the restart array of `data`.
    pub fn new(data: Bytes, origin: BlockOrigin) -> Result<Block> {
        let n = data.len();
        let num_restarts = read_u32(&data, n.wrapping_sub(4))
            .filter(|_| n >= 4)
            .ok_or_else(|| origin.corrupt("block too short"))? as usize;
        let restarts_at = num_restarts
            .checked_mul(4)
            .and_then(|r| n.checked_sub(4 + r))
            .filter(|_| num_restarts > 0)
            .ok_or_else(|| origin.corrupt(format!("bad restart count {num_restarts}")))?;
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
        read_u32(&self.data, self.restarts_at + 4 * i).unwrap_or(0) as usize
    }
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
        let d = &self.block.data[..end];
        let at = self.current;
        let parsed = (|| {
            let mut p = at;
            let (shared, n) = get_varint32(d.get(p..)?)?;
            p += n;
            let (unshared, n) = get_varint32(d.get(p..)?)?;
            p += n;
            let (vlen, n) = get_varint32(d.get(p..)?)?;
            p += n;
            let (shared, unshared, vlen) = (shared as usize, unshared as usize, vlen as usize);
            if shared > self.key.len() {
                return None;
            }
            let delta = d.get(p..p.checked_add(unshared)?)?;
            let vstart = p + unshared;
            let vend = vstart.checked_add(vlen).filter(|&e| e <= end)?;
            self.key.truncate(shared);
            self.key.extend_from_slice(delta);
            Some((vstart, vend))
        })();
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

    /// The key stored at restart point `i` (restart entries have no shared prefix).
    fn restart_key(&self, i: usize) -> Result<&[u8]> {
        let d = &self.block.data[..self.block.restarts_at];
        let at = self.block.restart(i);
        (|| {
            let mut p = at;
            let (shared, n) = get_varint32(d.get(p..)?)?;
            p += n;
            let (unshared, n) = get_varint32(d.get(p..)?)?;
            p += n;
            let (_, n) = get_varint32(d.get(p..)?)?;
            p += n;
            if shared != 0 {
                return None;
            }
            d.get(p..p.checked_add(unshared as usize)?)
        })()
        .ok_or_else(|| self.block.origin.corrupt(format!("bad restart entry at block offset {at}")))
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
        // Last restart point whose key is < target.
        let (mut lo, mut hi) = (0usize, self.block.num_restarts - 1);
        while lo < hi {
            let mid = (lo + hi).div_ceil(2);
            if key::compare(self.restart_key(mid)?, target) == Ordering::Less {
                lo = mid;
            } else {
                hi = mid - 1;
            }
        }
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
mod tests {
    use super::*;
    use crate::key::{make_internal_key, ValueKind};

    type Entries = Vec<(Vec<u8>, Vec<u8>)>;

    fn build(n: usize, interval: usize) -> (Block, Entries) {
        let mut b = BlockBuilder::new(interval);
        let entries: Vec<_> = (0..n)
            .map(|i| {
                (
                    make_internal_key(format!("key{:05}", i * 2).as_bytes(), 1, ValueKind::Put),
                    format!("value{i}").into_bytes(),
                )
            })
            .collect();
        for (k, v) in &entries {
            b.add(k, v);
        }
        let origin = BlockOrigin { file: Arc::from(Path::new("test.sst")), offset: 0 };
        (Block::new(Bytes::from(b.finish()), origin).unwrap(), entries)
    }

    #[test]
    fn round_trip_forward_and_backward() {
        for interval in [1, 2, 16] {
            let (block, entries) = build(100, interval);
            let mut it = block.iter();
            it.seek_to_first().unwrap();
            for (k, v) in &entries {
                assert!(it.valid());
                assert_eq!((it.key(), it.value()), (&k[..], &v[..]));
                it.next().unwrap();
            }
            assert!(!it.valid());
            it.seek_to_last().unwrap();
            for (k, _) in entries.iter().rev() {
                assert_eq!(it.key(), &k[..]);
                it.prev().unwrap();
            }
            assert!(!it.valid());
        }
    }

    #[test]
    fn seeks_use_restart_points() {
        let (block, entries) = build(100, 16);
        let mut it = block.iter();
        // Exact hits, including every restart key and the entries around them.
        for (k, _) in &entries {
            it.seek(k).unwrap();
            assert_eq!(it.key(), &k[..]);
            it.seek_for_prev(k).unwrap();
            assert_eq!(it.key(), &k[..]);
        }
        // Between keys: key00003 lies between key00002 and key00004.
        let between = make_internal_key(b"key00003", 1, ValueKind::Put);
        it.seek(&between).unwrap();
        assert_eq!(key::user_key(it.key()), b"key00004");
        it.seek_for_prev(&between).unwrap();
        assert_eq!(key::user_key(it.key()), b"key00002");
        it.seek(&make_internal_key(b"zzz", 1, ValueKind::Put)).unwrap();
        assert!(!it.valid());
        it.seek_for_prev(&make_internal_key(b"a", 1, ValueKind::Put)).unwrap();
        assert!(!it.valid());
        it.seek_for_prev(&make_internal_key(b"zzz", 1, ValueKind::Put)).unwrap();
        assert_eq!(key::user_key(it.key()), b"key00198");
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        let origin = BlockOrigin { file: Arc::from(Path::new("x.sst")), offset: 7 };
        assert!(Block::new(Bytes::from_static(&[1, 2]), origin.clone()).is_err());
        assert!(Block::new(Bytes::from_static(&[0, 0, 0, 0]), origin.clone()).is_err());
        assert!(Block::new(Bytes::from_static(&[9, 9, 9, 9, 0xff, 0, 0, 0]), origin.clone()).is_err());
        let (good, _) = build(40, 4);
        let mut bytes = good.data.to_vec();
        for i in 0..bytes.len() - 4 {
            bytes[i] ^= 0xa5;
            if let Ok(b) = Block::new(Bytes::from(bytes.clone()), origin.clone()) {
                let mut it = b.iter();
                let _ = it.seek_to_first();
                let mut steps = 0;
                while it.valid() && steps < 1000 {
                    if it.next().is_err() {
                        break;
                    }
                    steps += 1;
                }
                let _ = it.seek(&make_internal_key(b"key00050", 1, ValueKind::Put));
                let _ = it.seek_to_last();
                let _ = it.prev();
            }
            bytes[i] ^= 0xa5;
        }
    }
}
