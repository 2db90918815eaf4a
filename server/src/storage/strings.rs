//! String values: inline in the metadata record, or in segments once written in part.
//!
//! ```text
//! inline     metadata uid = 0,  body = the value
//! segmented  metadata uid != 0, body = length u64 LE [| log2 of the segment size u8]
//!            'E' | db u16 BE | uid u64 BE | segment index u64 BE  ->  up to a segment's bytes
//! ```
//! `SET` and every command that replaces a whole value write it inline, whatever its size: one
//! record, read back with one lookup. Commands that change part of a value (`SETRANGE`,
//! `APPEND`, `SETBIT`, `BITFIELD`) keep a value of up to [`INLINE_MAX`] bytes inline and turn a
//! longer one into segments of [`SEGMENT`] bytes under a fresh incarnation, so from then on
//! they read and write only the segments they touch: a `SETBIT` at bit 2^32-1 writes one
//! segment, not 512 MB. A segment holds bytes `index * size ..` of the value; one that is
//! absent, or shorter than the size, reads as zero bytes up to the value's length (a sparse
//! bitmap stores only its non-zero segments). The size is [`SEGMENT`] unless the metadata body
//! names another in a ninth byte: a HyperLogLog asks for [`HLL_SEGMENT`]-byte segments
//! ([`StringEdit::prefer_segment`]), so a PFADD that changes a register writes half a KiB
//! rather than 4 KiB; a value keeps the size it was first segmented with. (A build from before
//! the ninth byte would read such a value with the default size: wrong bytes, so a data
//! directory does not go back to one.) Segments are element records of the incarnation:
//! COPY, MOVE and RENAME carry them like a collection's elements, and once the key is deleted
//! or overwritten compaction drops them as orphans.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::{Bound, ControlFlow};

use bytes::Bytes;

use super::{KeyType, Meta, View};

/// Bytes per segment of a segmented string, unless its metadata says otherwise.
pub const SEGMENT: u64 = 4096;
/// Bytes per segment of a HyperLogLog's value (its 16,384 dense registers span 24 of them).
pub const HLL_SEGMENT: u64 = 512;
/// The segment sizes a metadata body may name (log2): 64 bytes to 1 MiB.
const SEGMENT_SHIFTS: std::ops::RangeInclusive<u8> = 6..=20;
/// The longest value a partial write keeps inline.
pub const INLINE_MAX: u64 = 4096;

/// A piece of a string value, in order (see [`View::string_chunks`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Chunk<'a> {
    /// Stored bytes.
    Bytes(&'a [u8]),
    /// This many zero bytes (never stored).
    Zeros(u64),
}

impl Meta {
    /// The length of a string value (inline or segmented).
    pub fn string_len(&self) -> u64 {
        if self.uid == 0 {
            self.body.len() as u64
        } else {
            self.body.get(..8).map_or(0, |b| u64::from_le_bytes(b.try_into().unwrap_or_default()))
        }
    }

    /// Whether this string keeps its value in segments.
    pub fn is_segmented(&self) -> bool {
        self.kind == KeyType::String && self.uid != 0
    }

    /// The size of a segmented string's segments: [`SEGMENT`], or the size its metadata body
    /// names in a ninth byte.
    pub fn segment_size(&self) -> u64 {
        match self.body.get(8) {
            Some(&shift) if SEGMENT_SHIFTS.contains(&shift) => 1 << shift,
            _ => SEGMENT,
        }
    }
}

fn segment_field(index: u64) -> [u8; 8] {
    index.to_be_bytes()
}

impl View<'_> {
    /// The whole value of string `meta`, as a string whose value is inline (a segmented one
    /// is assembled; its metadata otherwise unchanged).
    pub fn inline_string(&self, meta: Meta) -> lsm::Result<Meta> {
        if !meta.is_segmented() {
            return Ok(meta);
        }
        let body = self.string_range(&meta, 0, meta.string_len())?;
        Ok(Meta { uid: 0, body, ..meta })
    }

    /// Bytes `start..end` of string `meta` (clamped to its length).
    pub fn string_range(&self, meta: &Meta, start: u64, end: u64) -> lsm::Result<Bytes> {
        let end = end.min(meta.string_len());
        if start >= end {
            return Ok(Bytes::new());
        }
        if !meta.is_segmented() {
            return Ok(meta.body.slice(start as usize..end as usize));
        }
        let mut out = Vec::with_capacity((end - start) as usize);
        self.string_chunks(meta, start, end, |c| {
            match c {
                Chunk::Bytes(b) => out.extend_from_slice(b),
                Chunk::Zeros(n) => out.resize(out.len() + n as usize, 0),
            }
            ControlFlow::Continue(())
        })?;
        Ok(Bytes::from(out))
    }

    /// Calls `f` with the pieces of bytes `start..end` of string `meta` (clamped to its
    /// length), in order, until it breaks. Absent parts of a segmented value come as
    /// [`Chunk::Zeros`], so a walk over a sparse value costs what it stores.
    pub fn string_chunks(
        &self,
        meta: &Meta,
        start: u64,
        end: u64,
        mut f: impl FnMut(Chunk<'_>) -> ControlFlow<()>,
    ) -> lsm::Result<()> {
        let end = end.min(meta.string_len());
        if start >= end {
            return Ok(());
        }
        if !meta.is_segmented() {
            let _ = f(Chunk::Bytes(&meta.body[start as usize..end as usize]));
            return Ok(());
        }
        let mut at = start;
        let size = meta.segment_size();
        let first = segment_field(start / size);
        let last = segment_field((end - 1) / size);
        if first == last {
            // One segment (GETBIT, a short GETRANGE): a point read, cheaper than a range and
            // one a bloom filter can skip.
            let seg_start = (start / size) * size;
            let value = self.element(meta.uid, &first)?.unwrap_or_default();
            let stored_end = (seg_start + value.len() as u64).min(end);
            if stored_end > at {
                if f(Chunk::Bytes(&value[(at - seg_start) as usize..(stored_end - seg_start) as usize])).is_break() {
                    return Ok(());
                }
                at = stored_end;
            }
            if end > at {
                let _ = f(Chunk::Zeros(end - at));
            }
            return Ok(());
        }
        for kv in self.elements(meta.uid, Bound::Included(&first[..])) {
            let (field, value) = kv?;
            let Ok(index) = <[u8; 8]>::try_from(&field[..]).map(u64::from_be_bytes) else { continue };
            if field[..] > last[..] {
                break;
            }
            let seg_start = index * size;
            if seg_start > at && f(Chunk::Zeros(seg_start - at)).is_break() {
                return Ok(());
            }
            at = at.max(seg_start);
            let stored_end = (seg_start + value.len() as u64).min(end);
            if stored_end > at {
                let piece = &value[(at - seg_start) as usize..(stored_end - seg_start) as usize];
                if f(Chunk::Bytes(piece)).is_break() {
                    return Ok(());
                }
                at = stored_end;
            }
        }
        if end > at {
            let _ = f(Chunk::Zeros(end - at));
        }
        Ok(())
    }
}

/// A change to part of a string value: reads see the change so far; [`StringEdit::finish`]
/// writes the touched segments (or the inline value) and the metadata into one batch.
#[derive(Debug)]
pub struct StringEdit<'v> {
    view: View<'v>,
    /// The value before the edit (a segmented one reads its segments on demand).
    before: Option<Meta>,
    len: u64,
    /// The whole value while it stays inline.
    inline: Option<Vec<u8>>,
    /// Segments written so far (segmented mode), whole.
    segments: BTreeMap<u64, Vec<u8>>,
    /// Segments only read so far, as stored (shared with the memtable or block, not copied:
    /// a SETBIT that finds its bit already set reads one byte of one).
    stored: BTreeMap<u64, Bytes>,
    dirty: BTreeSet<u64>,
    /// The incarnation of the segmented value (0 while inline).
    uid: u64,
    /// The size of its segments (of those it will have, while inline).
    segment: u64,
    /// The value's expiry, kept by the edit.
    expire_at_ms: u64,
}

impl<'v> StringEdit<'v> {
    /// An edit of the string `before` (`None`: the key does not exist yet).
    pub fn new(view: View<'v>, before: Option<Meta>) -> Self {
        let len = before.as_ref().map_or(0, Meta::string_len);
        let expire_at_ms = before.as_ref().map_or(0, |m| m.expire_at_ms);
        let (inline, uid, segment) = match &before {
            Some(m) if m.is_segmented() => (None, m.uid, m.segment_size()),
            Some(m) => (Some(m.body.to_vec()), 0, SEGMENT),
            None => (Some(Vec::new()), 0, SEGMENT),
        };
        StringEdit {
            view,
            before,
            len,
            inline,
            segments: BTreeMap::new(),
            stored: BTreeMap::new(),
            dirty: BTreeSet::new(),
            uid,
            segment,
            expire_at_ms,
        }
    }

    /// Segments of `size` bytes (a power of two from 64 bytes to 1 MiB) if this edit turns
    /// the value into segments; a value already segmented keeps its size.
    pub fn prefer_segment(&mut self, size: u64) {
        debug_assert!(size.is_power_of_two() && SEGMENT_SHIFTS.contains(&(size.trailing_zeros() as u8)));
        if self.inline.is_some() {
            self.segment = size;
        }
    }

    /// Whether the key did not exist before the edit.
    pub fn is_new(&self) -> bool {
        self.before.is_none()
    }

    /// The value's length so far.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the value is empty so far.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Fills `buf` with bytes from `offset` (zeros past the end).
    pub fn read(&mut self, offset: u64, buf: &mut [u8]) -> lsm::Result<()> {
        buf.fill(0);
        if let Some(v) = &self.inline {
            let from = (offset as usize).min(v.len());
            let to = (offset as usize).saturating_add(buf.len()).min(v.len());
            buf[..to - from].copy_from_slice(&v[from..to]);
            return Ok(());
        }
        let mut done = 0;
        while done < buf.len() {
            let at = offset + done as u64;
            let (index, within) = (at / self.segment, (at % self.segment) as usize);
            let n = (buf.len() - done).min(self.segment as usize - within);
            let stored;
            let seg: &[u8] = match self.segments.get(&index) {
                Some(seg) => seg,
                None => {
                    stored = self.stored_segment(index)?;
                    &stored
                }
            };
            if within < seg.len() {
                let m = n.min(seg.len() - within);
                buf[done..done + m].copy_from_slice(&seg[within..within + m]);
            }
            done += n;
        }
        Ok(())
    }

    /// Writes `data` at `offset`, zero-filling any gap after the current end.
    pub fn write(&mut self, offset: u64, data: &[u8]) -> lsm::Result<()> {
        let end = offset + data.len() as u64;
        self.extend_to(end)?;
        self.segment_if_long();
        if let Some(v) = &mut self.inline {
            v[offset as usize..end as usize].copy_from_slice(data);
            return Ok(());
        }
        let mut done = 0;
        while done < data.len() {
            let at = offset + done as u64;
            let (index, within) = (at / self.segment, (at % self.segment) as usize);
            let n = (data.len() - done).min(self.segment as usize - within);
            if within == 0 && n == self.segment as usize {
                self.segments.insert(index, data[done..done + n].to_vec());
            } else {
                let seg = self.segment(index)?;
                if seg.len() < within + n {
                    seg.resize(within + n, 0);
                }
                seg[within..within + n].copy_from_slice(&data[done..done + n]);
            }
            self.dirty.insert(index);
            done += n;
        }
        Ok(())
    }

    /// Makes the value at least `len` bytes long (zero bytes added at the end).
    pub fn extend_to(&mut self, len: u64) -> lsm::Result<()> {
        if len <= self.len {
            return Ok(());
        }
        self.len = len;
        self.segment_if_long();
        if let Some(v) = &mut self.inline {
            v.resize(len as usize, 0);
        }
        Ok(())
    }

    /// Turns an inline value longer than [`INLINE_MAX`] into segments of a new incarnation
    /// (only its non-zero segments become records). Only a write calls this: reading a long
    /// inline value changes nothing.
    fn segment_if_long(&mut self) {
        if self.len <= INLINE_MAX {
            return;
        }
        let Some(v) = self.inline.take() else { return };
        self.uid = self.view.storage.new_uid();
        for (index, chunk) in v.chunks(self.segment as usize).enumerate() {
            if chunk.iter().any(|&b| b != 0) {
                self.segments.insert(index as u64, chunk.to_vec());
                self.dirty.insert(index as u64);
            }
        }
    }

    /// Segment `index` of the stored value (empty if absent, or if the edit made a new
    /// incarnation), read once.
    fn stored_segment(&mut self, index: u64) -> lsm::Result<Bytes> {
        if let Some(seg) = self.stored.get(&index) {
            return Ok(seg.clone());
        }
        let seg = match &self.before {
            Some(m) if m.is_segmented() && m.uid == self.uid => {
                self.view.element(m.uid, &segment_field(index))?.unwrap_or_default()
            }
            _ => Bytes::new(),
        };
        self.stored.insert(index, seg.clone());
        Ok(seg)
    }

    /// Segment `index` as the edit sees it, to change: copied from the stored value on first
    /// use.
    fn segment(&mut self, index: u64) -> lsm::Result<&mut Vec<u8>> {
        if !self.segments.contains_key(&index) {
            let stored = self.stored_segment(index)?.to_vec();
            self.stored.remove(&index);
            self.segments.insert(index, stored);
        }
        Ok(self.segments.entry(index).or_default())
    }

    /// Adds the edited value for `key` (keeping its expiry) to `batch`; returns the metadata
    /// written.
    pub fn finish(self, batch: &mut lsm::WriteBatch, key: &[u8]) -> Meta {
        let expire_at_ms = self.expire_at_ms;
        let meta = match self.inline {
            Some(v) => Meta::string(Bytes::from(v), expire_at_ms),
            None => {
                let fresh = self.before.as_ref().is_none_or(|m| m.uid != self.uid);
                if fresh {
                    self.view.claim(batch, self.uid, key);
                }
                for index in &self.dirty {
                    let seg = &self.segments[index];
                    // Trailing zeros are implicit.
                    let used = seg.iter().rposition(|&b| b != 0).map_or(0, |p| p + 1);
                    if used == 0 {
                        self.view.delete_element(batch, self.uid, &segment_field(*index));
                    } else {
                        self.view.put_element(batch, self.uid, &segment_field(*index), &seg[..used]);
                    }
                }
                let mut body = self.len.to_le_bytes().to_vec();
                if self.segment != SEGMENT {
                    body.push(self.segment.trailing_zeros() as u8);
                }
                Meta { kind: KeyType::String, expire_at_ms, uid: self.uid, body: Bytes::from(body) }
            }
        };
        // The edit keeps the stored TTL: its index entry stands.
        self.view.rewrite_meta(batch, key, &meta, expire_at_ms);
        meta
    }
}

#[cfg(test)]
mod tests {
    use std::ops::ControlFlow;

    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    use super::*;
    use crate::storage::tests::filtered_storage as storage;
    use crate::storage::{ExecContext, Storage};

    fn segments(s: &Storage, meta: &Meta) -> Vec<(Bytes, Bytes)> {
        let cx = ExecContext::new();
        s.view(&cx, 0).elements(meta.uid, Bound::Unbounded).collect::<lsm::Result<_>>().unwrap()
    }

    /// One edit: `f` changes the value, then it is written.
    fn edit(s: &Storage, key: &[u8], f: impl FnOnce(&mut StringEdit<'_>)) -> Meta {
        let cx = ExecContext::new();
        let v = s.view(&cx, 0);
        let mut e = StringEdit::new(v, v.get(key).unwrap());
        f(&mut e);
        let mut b = lsm::WriteBatch::new();
        let meta = e.finish(&mut b, key);
        s.write(&cx, b).unwrap();
        meta
    }

    #[test]
    fn a_bit_at_the_end_of_512_mb_writes_one_segment() {
        let dir = tempfile::tempdir().unwrap();
        let s = storage(dir.path());
        let last = (1u64 << 29) - 1;
        let meta = edit(&s, b"bits", |e| e.write(last, &[0x01]).unwrap());
        assert!(meta.is_segmented());
        assert_eq!(meta.string_len(), 1 << 29);
        let segs = segments(&s, &meta);
        assert_eq!(segs.len(), 1, "only the segment that holds the byte");
        assert_eq!(segs[0].0[..], (last / SEGMENT).to_be_bytes());
        assert_eq!(segs[0].1.len(), SEGMENT as usize, "zeros before the byte, none after");
        let cx = ExecContext::new();
        let v = s.view(&cx, 0);
        assert_eq!(&v.string_range(&meta, last - 1, last + 5).unwrap()[..], &[0, 1]);
        let mut pieces = Vec::new();
        v.string_chunks(&meta, 0, u64::MAX, |c| {
            pieces.push(match c {
                Chunk::Bytes(b) => (false, b.len() as u64, b.iter().map(|&x| u64::from(x)).sum::<u64>()),
                Chunk::Zeros(n) => (true, n, 0),
            });
            ControlFlow::Continue(())
        })
        .unwrap();
        let total: u64 = pieces.iter().map(|p| p.1).sum();
        assert_eq!(total, 1 << 29);
        assert_eq!(pieces.iter().map(|p| p.2).sum::<u64>(), 1);
        assert!(pieces.len() <= 3, "{pieces:?}");
    }

    #[test]
    fn edits_match_a_byte_vector_and_orphans_are_compacted_away() {
        let dir = tempfile::tempdir().unwrap();
        let s = storage(dir.path());
        let mut rng = StdRng::seed_from_u64(7);
        let mut model: Vec<u8> = Vec::new();
        for round in 0..300 {
            let offset = if rng.random_bool(0.8) { rng.random_range(0..20_000) } else { model.len() as u64 };
            let data: Vec<u8> = (0..rng.random_range(1..6000)).map(|_| rng.random()).collect();
            let grow = rng.random_range(0..30_000u64);
            let meta = edit(&s, b"k", |e| {
                // Reads through the edit see the value as it stands.
                let mut buf = vec![0u8; 64];
                e.read(offset, &mut buf).unwrap();
                let want: Vec<u8> = (0..64).map(|i| model.get(offset as usize + i).copied().unwrap_or(0)).collect();
                assert_eq!(buf, want, "round {round}");
                e.write(offset, &data).unwrap();
                if round % 7 == 0 {
                    e.extend_to(grow).unwrap();
                }
            });
            let end = offset as usize + data.len();
            if model.len() < end {
                model.resize(end, 0);
            }
            model[offset as usize..end].copy_from_slice(&data);
            if round % 7 == 0 && (model.len() as u64) < grow {
                model.resize(grow as usize, 0);
            }
            assert_eq!(meta.string_len(), model.len() as u64);
            let cx = ExecContext::new();
            let v = s.view(&cx, 0);
            let whole = v.inline_string(v.get(b"k").unwrap().unwrap()).unwrap();
            assert!(whole.body[..] == model[..], "round {round}");
            let (a, b) = (rng.random_range(0..model.len() as u64), rng.random_range(0..30_000u64));
            let part = v.string_range(&meta, a, a + b).unwrap();
            assert!(part[..] == model[a as usize..(a + b).min(model.len() as u64) as usize]);
            // Short reads, mostly within one segment (a point read of it): GETBIT, GETRANGE.
            for _ in 0..20 {
                let (a, n) = (rng.random_range(0..model.len() as u64 + 10), rng.random_range(1..64u64));
                let part = v.string_range(&meta, a, a + n).unwrap();
                let want = model.get(a as usize..(a + n).min(model.len() as u64) as usize).unwrap_or_default();
                assert!(part[..] == want[..], "round {round}: {n} bytes at {a}");
            }
        }
        let meta = s.view(&ExecContext::new(), 0).get(b"k").unwrap().unwrap();
        assert!(meta.is_segmented() && !segments(&s, &meta).is_empty());
        // Overwritten whole (SET): the segments are orphans, and compaction drops them.
        s.set_string(&ExecContext::new(), 0, b"k", Bytes::from_static(b"short"), 0).unwrap();
        s.engine().compact_range::<&[u8], _>(..).unwrap();
        assert!(segments(&s, &meta).is_empty());
        let entries: u64 = s.engine().live_files().iter().map(|f| f.entries).sum();
        assert_eq!(entries, 2, "the string's metadata and the layout record");
    }

    #[test]
    fn a_value_keeps_the_segment_size_it_was_segmented_with() {
        let dir = tempfile::tempdir().unwrap();
        let s = storage(dir.path());
        let value: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8 + 1).collect();
        let edit_with = |key: &[u8], size: Option<u64>, at: u64, data: &[u8]| {
            let cx = ExecContext::new();
            let v = s.view(&cx, 0);
            let mut e = StringEdit::new(v, v.get(key).unwrap());
            if let Some(size) = size {
                e.prefer_segment(size);
            }
            e.write(at, data).unwrap();
            let mut b = lsm::WriteBatch::new();
            let meta = e.finish(&mut b, key);
            s.write(&cx, b).unwrap();
            meta
        };
        let small = edit_with(b"hll", Some(HLL_SEGMENT), 0, &value);
        assert_eq!((small.segment_size(), small.body.len()), (HLL_SEGMENT, 9));
        let segs = segments(&s, &small);
        assert_eq!(segs.len(), 10_000usize.div_ceil(HLL_SEGMENT as usize));
        assert!(segs.iter().all(|(_, seg)| seg.len() as u64 <= HLL_SEGMENT));
        // Later edits, asked or not, keep the size; reads cross segment ends correctly.
        let small = edit_with(b"hll", None, 1000, b"xyz");
        assert_eq!(small.segment_size(), HLL_SEGMENT);
        let mut model = value.clone();
        model[1000..1003].copy_from_slice(b"xyz");
        let cx = ExecContext::new();
        let v = s.view(&cx, 0);
        assert!(v.string_range(&small, 0, 20_000).unwrap()[..] == model[..]);
        assert_eq!(&v.string_range(&small, 1022, 1026).unwrap()[..], &model[1022..1026]);
        // A value first segmented with the default size keeps that one.
        edit_with(b"big", None, 0, &value);
        let big = edit_with(b"big", Some(HLL_SEGMENT), 0, b"a");
        assert_eq!((big.segment_size(), big.body.len()), (SEGMENT, 8));
        assert_eq!(segments(&s, &big).len(), 3);
    }

    #[test]
    fn short_values_stay_inline() {
        let dir = tempfile::tempdir().unwrap();
        let s = storage(dir.path());
        let meta = edit(&s, b"k", |e| e.write(10, b"abc").unwrap());
        assert!(!meta.is_segmented());
        assert_eq!(&meta.body[..], b"\0\0\0\0\0\0\0\0\0\0abc");
        let meta = edit(&s, b"k", |e| e.write(INLINE_MAX, b"x").unwrap());
        assert!(meta.is_segmented(), "one byte past INLINE_MAX");
        assert_eq!(meta.string_len(), INLINE_MAX + 1);
    }
}
