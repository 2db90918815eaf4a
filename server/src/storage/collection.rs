//! Collections on the engine: a metadata record per key, element records per
//! member under the key's incarnation id, a score index for sorted sets, and a reverse record
//! from each incarnation id to its key so compaction can tell live elements from orphans.
//!
//! ```text
//! element      'E' | db u16 BE | uid u64 BE | field           ->  value
//! score index  'Z' | db u16 BE | uid u64 BE | score (8) | member ->  (empty)
//! owner        'U' | uid u64 BE                               ->  db u16 BE | user key
//! ```
//! A collection's metadata body starts with its element count (u64 LE); lists add the index of
//! their first element and the index after their last (u64 LE each). Deleting or overwriting a
//! collection writes only its metadata: the elements of the old incarnation are unreachable
//! (reads go through the current uid) and [`super::ShaleFilter`] drops them during compaction.

use std::ops::Bound;

use bytes::{BufMut, Bytes, BytesMut};

use super::{decode, expiry_key, meta_key, now_ms, ExecContext, KeyType, Meta, RawRange, Storage};

/// The element record key of `field` in incarnation `uid` of physical database `pdb`.
pub(super) fn element_key(pdb: u16, uid: u64, field: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(11 + field.len());
    k.push(b'E');
    k.extend_from_slice(&pdb.to_be_bytes());
    k.extend_from_slice(&uid.to_be_bytes());
    k.extend_from_slice(field);
    k
}

/// The owner record key of incarnation `uid`.
pub(super) fn owner_key(uid: u64) -> [u8; 9] {
    let mut k = [0u8; 9];
    k[0] = b'U';
    k[1..].copy_from_slice(&uid.to_be_bytes());
    k
}

/// The prefix every score-index record of `uid` in `pdb` starts with.
fn score_prefix(pdb: u16, uid: u64) -> Vec<u8> {
    let mut k = Vec::with_capacity(19);
    k.push(b'Z');
    k.extend_from_slice(&pdb.to_be_bytes());
    k.extend_from_slice(&uid.to_be_bytes());
    k
}

/// Encodes a score so byte order is numeric order (-inf < … < -0.0 = 0.0 < … < +inf).
pub fn encode_score(score: f64) -> [u8; 8] {
    // -0.0 and 0.0 are the same score in Redis.
    let score = if score == 0.0 { 0.0 } else { score };
    let bits = score.to_bits();
    let ordered = if bits >> 63 == 1 { !bits } else { bits | (1 << 63) };
    ordered.to_be_bytes()
}

/// The inverse of [`encode_score`].
pub fn decode_score(bytes: &[u8]) -> f64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&bytes[..8]);
    let ordered = u64::from_be_bytes(b);
    let bits = if ordered >> 63 == 1 { ordered & !(1 << 63) } else { !ordered };
    f64::from_bits(bits)
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
}

/// Where a new list's indexes start: the middle of the u64 range, so both ends have room.
pub const LIST_START: u64 = 1 << 63;

impl Header {
    /// Reads the header of a collection's metadata body.
    pub fn of(meta: &Meta) -> Header {
        let word = |i: usize| {
            meta.body.get(i * 8..i * 8 + 8).map_or(0, |b| u64::from_le_bytes(b.try_into().unwrap_or_default()))
        };
        Header { count: word(0), head: word(1), tail: word(2) }
    }

    /// The metadata body holding this header (`list` adds head and tail).
    pub fn body(&self, list: bool) -> Bytes {
        let mut b = BytesMut::with_capacity(24);
        b.put_u64_le(self.count);
        if list {
            b.put_u64_le(self.head);
            b.put_u64_le(self.tail);
        }
        b.freeze()
    }
}

/// One database as a command sees it: the logical-to-physical mapping is resolved once, so a
/// command's reads and writes all land in the same place even if SWAPDB runs meanwhile.
/// Reads and writes go through the command's execution context.
#[derive(Debug, Clone, Copy)]
pub struct View<'a> {
    storage: &'a Storage,
    cx: &'a ExecContext,
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
        self.storage.get_physical(self.cx, self.pdb, key, now_ms())
    }

    /// Adds writing `meta` for `key` (and its expiry index entry) to `batch`.
    pub fn put_meta(&self, batch: &mut lsm::WriteBatch, key: &[u8], meta: &Meta) {
        batch.put(meta_key(self.pdb, key), meta.encode());
        if meta.expire_at_ms != 0 {
            batch.put(expiry_key(meta.expire_at_ms, self.pdb, key), b"");
        }
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
        let list = kind == KeyType::List;
        let header = Header { count: 0, head: LIST_START, tail: LIST_START };
        Meta { kind, expire_at_ms: 0, uid, body: header.body(list) }
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

    /// Adds writing `field` = `value` to `batch`.
    pub fn put_element(&self, batch: &mut lsm::WriteBatch, uid: u64, field: &[u8], value: &[u8]) {
        batch.put(element_key(self.pdb, uid, field), value);
    }

    /// Adds deleting `field` to `batch`.
    pub fn delete_element(&self, batch: &mut lsm::WriteBatch, uid: u64, field: &[u8]) {
        batch.delete(element_key(self.pdb, uid, field));
    }

    /// Elements of `uid` in field order, from `from` on.
    pub fn elements(&self, uid: u64, from: Bound<&[u8]>) -> ElementIter {
        let prefix = element_key(self.pdb, uid, b"");
        let start = match from {
            Bound::Included(f) => Bound::Included(element_key(self.pdb, uid, f)),
            Bound::Excluded(f) => Bound::Excluded(element_key(self.pdb, uid, f)),
            Bound::Unbounded => Bound::Included(prefix.clone()),
        };
        let end = prefix_end(&prefix);
        ElementIter { range: self.cx.range(&self.storage.engine, start, Bound::Excluded(end)), skip: prefix.len() }
    }

    /// Elements of `uid` in reverse field order, from the end.
    pub fn elements_rev(&self, uid: u64) -> impl Iterator<Item = lsm::Result<(Bytes, Bytes)>> + 'a {
        let prefix = element_key(self.pdb, uid, b"");
        let end = prefix_end(&prefix);
        let skip = prefix.len();
        self.cx
            .range(&self.storage.engine, Bound::Included(prefix), Bound::Excluded(end))
            .rev()
            .map(move |kv| kv.map(|(k, v)| (k.slice(skip..), v)))
    }

    /// Adds a score-index record for `member` at `score` to `batch`.
    pub fn put_score(&self, batch: &mut lsm::WriteBatch, uid: u64, score: f64, member: &[u8]) {
        batch.put(self.score_key(uid, score, member), b"");
    }

    /// Adds removing the score-index record of `member` at `score` to `batch`.
    pub fn delete_score(&self, batch: &mut lsm::WriteBatch, uid: u64, score: f64, member: &[u8]) {
        batch.delete(self.score_key(uid, score, member));
    }

    fn score_key(&self, uid: u64, score: f64, member: &[u8]) -> Vec<u8> {
        let mut k = score_prefix(self.pdb, uid);
        k.extend_from_slice(&encode_score(score));
        k.extend_from_slice(member);
        k
    }

    /// The score index of `uid` in (score, member) order, as a double-ended iterator of
    /// `(score, member)` starting at score `min` (inclusive) when given.
    pub fn scores(&self, uid: u64, min: Option<f64>) -> ScoreIter {
        let prefix = score_prefix(self.pdb, uid);
        let end = prefix_end(&prefix);
        let start = match min {
            Some(m) => {
                let mut k = prefix.clone();
                k.extend_from_slice(&encode_score(m));
                k
            }
            None => prefix.clone(),
        };
        ScoreIter {
            range: self.cx.range(&self.storage.engine, Bound::Included(start), Bound::Excluded(end)),
            skip: prefix.len(),
        }
    }
}

/// `(field, value)` pairs of one collection.
pub struct ElementIter {
    range: RawRange,
    skip: usize,
}

impl std::fmt::Debug for ElementIter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ElementIter").finish_non_exhaustive()
    }
}

impl Iterator for ElementIter {
    type Item = lsm::Result<(Bytes, Bytes)>;

    fn next(&mut self) -> Option<Self::Item> {
        Some(self.range.next()?.map(|(k, v)| (k.slice(self.skip..), v)))
    }
}

/// `(score, member)` pairs of one sorted set.
pub struct ScoreIter {
    range: RawRange,
    skip: usize,
}

impl std::fmt::Debug for ScoreIter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScoreIter").finish_non_exhaustive()
    }
}

impl ScoreIter {
    fn decode(&self, k: Bytes) -> (f64, Bytes) {
        (decode_score(&k[self.skip..self.skip + 8]), k.slice(self.skip + 8..))
    }
}

impl Iterator for ScoreIter {
    type Item = lsm::Result<(f64, Bytes)>;

    fn next(&mut self) -> Option<Self::Item> {
        let kv = self.range.next()?;
        Some(kv.map(|(k, _)| self.decode(k)))
    }
}

impl DoubleEndedIterator for ScoreIter {
    fn next_back(&mut self) -> Option<Self::Item> {
        let kv = self.range.next_back()?;
        Some(kv.map(|(k, _)| self.decode(k)))
    }
}

/// The first key after every key starting with `prefix` (which never ends in 0xff here: it ends
/// in a uid or db byte pattern followed by at least the tag, so incrementing works).
pub(super) fn prefix_end(prefix: &[u8]) -> Vec<u8> {
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
    Ok(meta.uid == uid && meta.kind != KeyType::String && !meta.is_expired(now_ms()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scores_sort_numerically_as_bytes() {
        let scores = [f64::NEG_INFINITY, -1e300, -2.5, -1.0, -1e-300, 0.0, 1e-300, 1.0, 2.5, 1e300, f64::INFINITY];
        let encoded: Vec<[u8; 8]> = scores.iter().map(|&s| encode_score(s)).collect();
        assert!(encoded.windows(2).all(|w| w[0] < w[1]));
        for s in scores {
            assert_eq!(decode_score(&encode_score(s)), s);
        }
        assert_eq!(encode_score(-0.0), encode_score(0.0), "-0 and 0 are one score");
    }

    #[test]
    fn headers_round_trip() {
        let h = Header { count: 3, head: LIST_START - 1, tail: LIST_START + 2 };
        let meta = Meta { kind: KeyType::List, expire_at_ms: 0, uid: 7, body: h.body(true) };
        assert_eq!(Header::of(&meta), h);
        let set = Meta { kind: KeyType::Set, expire_at_ms: 0, uid: 7, body: h.body(false) };
        assert_eq!(Header::of(&set).count, 3);
    }
}
