//! Collections on the engine: a metadata record per key, a record per element under the key's
//! incarnation id, a score index for sorted sets, and a reverse record from each incarnation id
//! to its key so compaction can tell live elements from orphans.
//!
//! ```text
//! element      'E' | db u16 BE | uid u64 BE | field           ->  value
//! pick record  'R' | db u16 BE | uid u64 BE | hash u64 BE | member ->  see below   (picks/mod.rs)
//! score index  'Z' | db u16 BE | uid u64 BE | score (8) | member ->  (empty)   (see scores.rs)
//! owner        'U' | uid u64 BE                               ->  db u16 BE | user key
//! ```
//! Lists (index → value) and streams keep element records. A set's, hash's or sorted set's
//! members are their pick records alone, valued empty, with the field's value (after a compact
//! hash's insertion ordinal, `field_order.rs`) or with the member's score
//! ([`super::picks::members_in_picks`]: [`View::member`], [`View::members`], [`View::field`]).
//! [`View::entries`] and [`View::entry`] read either kind by the collection's type; element
//! records are read through [`super::ElementIter`] (`elements.rs`).
//! A collection's metadata body starts with its element count (u64 LE). Lists add the index of
//! their first element and the index after their last (u64 LE each). Sets, hashes and sorted
//! sets add how many members were removed since the incarnation was written (u64 LE); sorted
//! sets then keep the bounds of their live score index ([`super::ScoreBounds`]), and a compact hash the
//! next ordinal of its fields' insertion order (`field_order.rs`). Deleting or
//! overwriting a collection writes only its metadata: the elements of the old incarnation are
//! unreachable (reads go through the current uid) and [`super::ShaleFilter`] drops them during
//! compaction. A collection whose removals outnumber twice its members is rewritten under a new
//! uid in the same batch ([`View::rebuild_into`]), so the records its reads step over stay
//! within a small multiple of its live members.

use std::ops::Bound;

use bytes::{BufMut, Bytes, BytesMut};

use super::elements::{key_tail, walk_in_order, ElementIter};
use super::picks::members_in_picks;
use super::{decode, meta_key, now_ms, ExecContext, KeyType, Meta, RawRange, Storage};

/// The element record key of `field` in incarnation `uid` of physical database `pdb`.
pub(super) fn element_key(pdb: u16, uid: u64, field: &[u8]) -> Vec<u8> {
    super::record_key(b'E', pdb, uid, &[field])
}

/// The owner record key of incarnation `uid`.
pub(super) fn owner_key(uid: u64) -> [u8; 9] {
    let mut k = [0u8; 9];
    k[0] = b'U';
    k[1..].copy_from_slice(&uid.to_be_bytes());
    k
}

/// The fields a collection keeps in its metadata body.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Header {
    /// Number of elements.
    pub count: u64,
    /// Lists: index of the first element.
    pub head: u64,
    /// Lists: index after the last element.
    pub tail: u64,
    /// Sets, hashes, sorted sets: members removed since this incarnation was written.
    pub removed: u64,
}

/// Where a new list's indexes start: the middle of the u64 range, so both ends have room.
pub const LIST_START: u64 = 1 << 63;

/// A collection is rewritten under a fresh incarnation once `removed` passes twice its count
/// plus this (so small collections are not rewritten for every few removals).
const REBUILD_SLACK: u64 = 128;

fn word(body: &[u8], i: usize) -> u64 {
    body.get(i * 8..i * 8 + 8).map_or(0, |b| u64::from_le_bytes(b.try_into().unwrap_or_default()))
}

impl Header {
    /// Reads the header of a collection's metadata body.
    pub fn of(meta: &Meta) -> Header {
        let b = &meta.body;
        if meta.kind == KeyType::List {
            Header { count: word(b, 0), head: word(b, 1), tail: word(b, 2), removed: 0 }
        } else {
            Header { count: word(b, 0), removed: word(b, 1), ..Header::default() }
        }
    }

    /// The metadata body holding this header for a collection of `kind` (a sorted set's score
    /// bounds are added by [`Header::body_for`]).
    pub fn body(&self, kind: KeyType) -> Bytes {
        let mut b = BytesMut::with_capacity(24);
        b.put_u64_le(self.count);
        if kind == KeyType::List {
            b.put_u64_le(self.head);
            b.put_u64_le(self.tail);
        } else {
            b.put_u64_le(self.removed);
        }
        b.freeze()
    }

    /// The body of `meta` with this header, keeping what follows the header: a sorted set's
    /// score bounds, a compact hash's next field ordinal (`field_order.rs`).
    pub fn body_for(&self, meta: &Meta) -> Bytes {
        let head = self.body(meta.kind);
        if !matches!(meta.kind, KeyType::ZSet | KeyType::Hash) || meta.body.len() <= head.len() {
            return head;
        }
        let mut b = BytesMut::from(&head[..]);
        b.put_slice(&meta.body[head.len()..]);
        b.freeze()
    }

    /// Whether the collection should be rewritten under a fresh incarnation.
    pub fn needs_rebuild(&self) -> bool {
        self.count > 0 && self.removed > self.count.saturating_mul(2).saturating_add(REBUILD_SLACK)
    }
}

/// One database as a command sees it: the logical-to-physical mapping is resolved once, so a
/// command's reads and writes all land in the same place even if SWAPDB runs meanwhile.
/// Reads and writes go through the command's execution context.
#[derive(Debug, Clone, Copy)]
pub struct View<'a> {
    pub(super) storage: &'a Storage,
    pub(super) cx: &'a ExecContext,
    pdb: u16,
}

impl Storage {
    /// Database `db` for one command running in `cx`.
    pub fn view<'a>(&'a self, cx: &'a ExecContext, db: u32) -> View<'a> {
        View { storage: self, cx, pdb: self.phys(db) }
    }
}

impl<'a> View<'a> {
    /// The physical database this view reads and writes.
    pub fn pdb(&self) -> u16 {
        self.pdb
    }

    /// The live metadata of `key`.
    pub fn get(&self, key: &[u8]) -> lsm::Result<Option<Meta>> {
        self.storage.get_physical(self.cx, self.pdb, key, self.cx.now_ms())
    }

    /// Adds writing `meta` for `key` (and its expiry index entry) to `batch`.
    pub fn put_meta(&self, batch: &mut lsm::WriteBatch, key: &[u8], meta: &Meta) {
        self.rewrite_meta(batch, key, meta, 0);
    }

    /// Adds writing `meta` over `key`'s stored metadata, read under the key's lock and expiring
    /// at `indexed_at` (0: no TTL), to `batch`: its expiry index entry only if the stored one does
    /// not cover it (see [`Storage::rewrite_into`]).
    pub fn rewrite_meta(&self, batch: &mut lsm::WriteBatch, key: &[u8], meta: &Meta, indexed_at: u64) {
        super::put_meta_record(batch, self.pdb, key, meta, indexed_at);
    }

    /// Adds deleting `key` to `batch` (a collection's elements become orphans).
    pub fn delete_meta(&self, batch: &mut lsm::WriteBatch, key: &[u8]) {
        batch.delete(meta_key(self.pdb, key));
    }

    /// A new, empty incarnation of a collection at `key` (its owner record goes into `batch`;
    /// the caller writes the metadata once it has elements).
    pub fn create(&self, batch: &mut lsm::WriteBatch, key: &[u8], kind: KeyType) -> Meta {
        let uid = self.storage.new_uid();
        self.claim(batch, uid, key);
        let header = Header { count: 0, head: LIST_START, tail: LIST_START, removed: 0 };
        Meta { kind, expire_at_ms: 0, uid, body: header.body(kind) }
    }

    /// Records that incarnation `uid` belongs to `key` here (RENAME moves a collection).
    pub fn claim(&self, batch: &mut lsm::WriteBatch, uid: u64, key: &[u8]) {
        let mut owner = Vec::with_capacity(2 + key.len());
        owner.extend_from_slice(&self.pdb.to_be_bytes());
        owner.extend_from_slice(key);
        batch.put(owner_key(uid), owner);
    }

    /// The value of `field` in incarnation `uid`.
    pub fn element(&self, uid: u64, field: &[u8]) -> lsm::Result<Option<Bytes>> {
        self.cx.get(&self.storage.engine, &element_key(self.pdb, uid, field))
    }

    /// Up to `n` elements of `uid` as `(field, value)`, for pops from one end: from `from` on
    /// in field order (`from_front`) or back from it, `then` being the field a pop after these
    /// would read first. A run of pops in one transaction or write group reads on from where
    /// the one before stood (see [`ExecContext::pop_follows`]); a lone pop of one element reads
    /// it with a point read.
    pub fn end_elements(
        &self,
        uid: u64,
        from: &[u8],
        then: &[u8],
        from_front: bool,
        n: usize,
    ) -> lsm::Result<Vec<(Bytes, Bytes)>> {
        if n == 0 {
            return Ok(Vec::new());
        }
        let at = element_key(self.pdb, uid, from);
        let follows = self.cx.pop_follows(&at, element_key(self.pdb, uid, then));
        if n == 1 && !follows {
            let value = self.cx.get(&self.storage.engine, &at)?;
            return Ok(value.map(|v| (Bytes::copy_from_slice(from), v)).into_iter().collect());
        }
        let prefix = element_key(self.pdb, uid, b"");
        let (start, end) = if from_front {
            (Bound::Included(at), Bound::Excluded(prefix_end(&prefix)))
        } else {
            (Bound::Included(prefix.clone()), Bound::Included(at))
        };
        let mut range = self.resuming_range(start, end);
        let mut out = Vec::with_capacity(n.min(1 << 16));
        while out.len() < n {
            let next = if from_front { range.next() } else { range.next_back() };
            let Some(kv) = next else { break };
            let (k, v) = kv?;
            out.push((key_tail(&k, prefix.len()), v));
        }
        Ok(out)
    }

    /// Adds writing `field` = `value` to `batch`.
    pub fn put_element(&self, batch: &mut lsm::WriteBatch, uid: u64, field: &[u8], value: &[u8]) {
        batch.put(element_key(self.pdb, uid, field), value);
    }

    /// Adds deleting `field` to `batch`.
    pub fn delete_element(&self, batch: &mut lsm::WriteBatch, uid: u64, field: &[u8]) {
        batch.delete(element_key(self.pdb, uid, field));
    }

    /// Elements of `uid` in field order, from `from` on.
    pub fn elements(&self, uid: u64, from: Bound<&[u8]>) -> ElementIter<'a> {
        let prefix = element_key(self.pdb, uid, b"");
        let start = match from {
            Bound::Included(f) => Bound::Included(element_key(self.pdb, uid, f)),
            Bound::Excluded(f) => Bound::Excluded(element_key(self.pdb, uid, f)),
            Bound::Unbounded => Bound::Included(prefix.clone()),
        };
        let end = prefix_end(&prefix);
        ElementIter {
            range: self.cx.range(&self.storage.engine, start, Bound::Excluded(end)),
            skip: prefix.len(),
            hash_fields: false,
        }
    }

    /// Elements of `uid` with fields in `[from, to)`, from either end.
    pub fn elements_between(&self, uid: u64, from: &[u8], to: &[u8]) -> ElementIter<'a> {
        self.elements_in(uid, from, to, false)
    }

    /// [`View::elements_between`] read from the front, which the next such read of the same
    /// transaction may go on from (a write group's XREADGROUPs of one stream, each starting
    /// just past the entry the one before it took: no seek each; see `context/merged.rs`).
    pub fn elements_resuming(&self, uid: u64, from: &[u8], to: &[u8]) -> ElementIter<'a> {
        self.elements_in(uid, from, to, true)
    }

    fn elements_in(&self, uid: u64, from: &[u8], to: &[u8], resuming: bool) -> ElementIter<'a> {
        let skip = element_key(self.pdb, uid, b"").len();
        let start = Bound::Included(element_key(self.pdb, uid, from));
        let end = Bound::Excluded(element_key(self.pdb, uid, to));
        let range =
            if resuming { self.resuming_range(start, end) } else { self.cx.range(&self.storage.engine, start, end) };
        ElementIter { range, skip, hash_fields: false }
    }

    /// Adds deleting the elements of `uid` with fields in `[from, to)` to `batch` (one range
    /// tombstone).
    pub fn delete_elements(&self, batch: &mut lsm::WriteBatch, uid: u64, from: &[u8], to: &[u8]) {
        batch.delete_range(element_key(self.pdb, uid, from), element_key(self.pdb, uid, to));
    }

    /// The values of up to `n` elements of `uid` from field `from` on and below field `to` (to
    /// the last without one), in field order (a list's LRANGE), each handed to `each` as it is
    /// read: one engine cursor, no copy of keys or values outside a transaction. A tight `to`
    /// lets the engine leave out the sources that hold only elements past it.
    pub fn values_from(
        &self,
        uid: u64,
        (from, to): (&[u8], Option<&[u8]>),
        n: usize,
        mut each: impl FnMut(&[u8]),
    ) -> lsm::Result<()> {
        let start = element_key(self.pdb, uid, from);
        let end = to.map_or_else(|| prefix_end(&element_key(self.pdb, uid, b"")), |to| element_key(self.pdb, uid, to));
        if !self.cx.may_step(n) {
            return Err(lsm::Error::WouldBlock);
        }
        let mut left = n;
        if left == 0 {
            return Ok(());
        }
        self.walk_ranges([(start, end)], |_, value| {
            each(value);
            left -= 1;
            left > 0
        })
    }

    /// Calls `visit(key, value)` for the records of each `[start, end)` range in turn, in key
    /// order, until it returns false: one engine cursor serves every range (a range costs a
    /// seek; ranges in key order that do not overlap share one bound and cost a seek only
    /// where a key lies between them, see [`walk_in_order`]), keys and values are borrowed
    /// from the engine's buffers, and every step counts against a memory-only attempt
    /// ([`View::step`]). Inside a transaction, whose buffered writes only
    /// [`View::raw_range`] merges in, a range at a time through it.
    pub(super) fn walk_ranges(
        &self,
        ranges: impl IntoIterator<Item = (Vec<u8>, Vec<u8>)>,
        mut visit: impl FnMut(&[u8], &[u8]) -> bool,
    ) -> lsm::Result<()> {
        let Some(mut it) = self.cursor() else {
            for (start, end) in ranges {
                for kv in self.raw_range(Bound::Included(start), Bound::Excluded(end)) {
                    let (key, value) = kv?;
                    if !visit(&key, &value) {
                        return Ok(());
                    }
                }
            }
            return Ok(());
        };
        let ranges: Vec<(Vec<u8>, Vec<u8>)> = ranges.into_iter().collect();
        let walk = (|| {
            if ranges.len() > 1 && ranges.windows(2).all(|w| w[0].1 <= w[1].0) {
                return walk_in_order(&mut it, &ranges, || self.step(), visit);
            }
            for (start, end) in ranges {
                it.set_bounds(Bound::Included(start.clone()), Bound::Excluded(end));
                it.seek(&start)?;
                while it.valid() {
                    if !self.step() {
                        return Err(lsm::Error::WouldBlock);
                    }
                    if !visit(it.key(), it.value()) {
                        return it.status();
                    }
                    it.next()?;
                }
                it.status()?;
            }
            Ok(())
        })();
        self.noted_walk(walk)
    }

    /// Elements of `uid` in reverse field order, from the end.
    pub fn elements_rev(&self, uid: u64) -> impl Iterator<Item = lsm::Result<(Bytes, Bytes)>> + 'a {
        let prefix = element_key(self.pdb, uid, b"");
        let end = prefix_end(&prefix);
        let skip = prefix.len();
        self.cx
            .range(&self.storage.engine, Bound::Included(prefix), Bound::Excluded(end))
            .rev()
            .map(move |kv| kv.map(|(k, v)| (key_tail(&k, skip), v)))
    }

    /// The entries of the collection `meta` from `from` on (a field or member, as a SCAN cursor
    /// names it): a set's, hash's or sorted set's member records in pick order (see `picks/mod.rs`;
    /// a hash's values decoded, see `field_order.rs`), a list's or stream's element records in
    /// field order.
    pub fn entries(&self, meta: &Meta, from: Bound<&[u8]>) -> ElementIter<'a> {
        match meta.kind {
            KeyType::Hash => ElementIter { hash_fields: true, ..self.members(meta.uid, from) },
            kind if members_in_picks(kind) => self.members(meta.uid, from),
            _ => self.elements(meta.uid, from),
        }
    }

    /// The value of the entry `field` of the collection `meta` (see [`View::entries`]).
    pub fn entry(&self, meta: &Meta, field: &[u8]) -> lsm::Result<Option<Bytes>> {
        if meta.kind == KeyType::Hash {
            self.field(meta.uid, field)
        } else if members_in_picks(meta.kind) {
            self.member(meta.uid, field)
        } else {
            self.element(meta.uid, field)
        }
    }

    /// An engine cursor for many short reads, also inside a transaction: lay
    /// [`View::buffered_in`] over what it reads (see [`ExecContext::engine_cursor`]).
    pub(super) fn engine_cursor(&self) -> lsm::DbIterator {
        self.cx.engine_cursor(&self.storage.engine)
    }

    /// Voids a memory-only attempt of the running command (it runs again on an executor
    /// thread); true if it was one (see [`ExecContext::void_memory_only`]).
    pub(super) fn void_memory_only(&self) -> bool {
        self.cx.void_memory_only()
    }

    /// The running transaction's writes in `[start, end)` (`None` outside one).
    pub(super) fn buffered_in(&self, start: &[u8], end: &[u8]) -> Option<super::context::Overlay> {
        self.cx.buffered_in(start, end)
    }

    /// A cursor for many short reads (see [`ExecContext::cursor`]: the walk's outcome goes
    /// through [`ExecContext::noted_walk`]).
    pub(super) fn cursor(&self) -> Option<lsm::DbIterator> {
        self.cx.cursor(&self.storage.engine)
    }

    /// Counts a record a walk with [`View::cursor`] steps over: false once a memory-only
    /// attempt has stepped over too many (it is void then, see [`ExecContext::step`]).
    pub(super) fn step(&self) -> bool {
        self.cx.step()
    }

    /// The outcome of a walk with [`View::cursor`], noted (see [`ExecContext::noted_walk`]).
    pub(super) fn noted_walk<T>(&self, walk: lsm::Result<T>) -> lsm::Result<T> {
        self.cx.noted_walk(walk)
    }

    /// The record at `key` as this command sees it.
    pub(super) fn raw_get(&self, key: &[u8]) -> lsm::Result<Option<Bytes>> {
        self.cx.get(&self.storage.engine, key)
    }

    /// Records in `[start, end)` as this command sees them.
    pub(super) fn raw_range(&self, start: Bound<Vec<u8>>, end: Bound<Vec<u8>>) -> RawRange<'a> {
        self.cx.range(&self.storage.engine, start, end)
    }

    /// [`View::raw_range`] for pops from one end: inside a transaction the next pop goes on
    /// from where this one's engine range stood (see `context/merged.rs`).
    pub(super) fn resuming_range(&self, start: Bound<Vec<u8>>, end: Bound<Vec<u8>>) -> RawRange<'a> {
        self.cx.resuming_range(&self.storage.engine, start, end, self.storage.pick_cache.epoch())
    }
}

/// The first key after every key starting with `prefix` (trailing 0xff bytes are dropped before
/// the last byte is incremented).
pub(crate) fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0xff; prefix.len() + 1]
}

/// Whether incarnation `uid` of physical database `pdb` is still the live value of its key:
/// its owner record names a key whose live metadata has that uid. Used by the compaction filter;
/// both reads come from one snapshot, so a concurrent RENAME cannot fool it.
pub(super) fn is_live(snap: &lsm::WeakSnapshot, pdb: u16, uid: u64) -> lsm::Result<bool> {
    let Some(owner) = snap.get(owner_key(uid))? else { return Ok(false) };
    if owner.len() < 2 || owner[..2] != pdb.to_be_bytes() {
        return Ok(false);
    }
    let Some(raw) = snap.get(meta_key(pdb, &owner[2..]))? else { return Ok(false) };
    let meta = decode(raw)?;
    Ok(meta.uid == uid && !meta.is_expired(now_ms()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_round_trip() {
        let h = Header { count: 3, head: LIST_START - 1, tail: LIST_START + 2, removed: 0 };
        let meta = Meta { kind: KeyType::List, expire_at_ms: 0, uid: 7, body: h.body(KeyType::List) };
        assert_eq!(Header::of(&meta), h);
        let s = Header { count: 3, removed: 9, ..Header::default() };
        let set = Meta { kind: KeyType::Set, expire_at_ms: 0, uid: 7, body: s.body(KeyType::Set) };
        assert_eq!(Header::of(&set), s);
        assert!(!s.needs_rebuild());
        assert!(Header { count: 3, removed: 200, ..Header::default() }.needs_rebuild());
        assert!(!Header { count: 0, removed: 200, ..Header::default() }.needs_rebuild());
    }
}
